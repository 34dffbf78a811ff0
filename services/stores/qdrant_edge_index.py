"""Qdrant Edge: the Qdrant engine in-process, for the embedded default.

A shard directory has a single owner, which is why `memstream up` runs the
worker and the read service in one process. Inside the process, updates,
payload reads, flush and close run on one owner thread, in arrival order:
they keep the engine's writes off the event loop that six agents and the
HTTP server share, and writes never overlap one another.

Recall's legs are the exception: they run on the caller's loop. A batch of
legs that reads no payload is a fraction of a millisecond and holds the GIL
throughout (nothing else in the process could run meanwhile anyway), while
a hop to the owner thread and back is two GIL hand-offs, each of which can
wait a whole switch interval (5 ms) under concurrent recalls. At 8
concurrent clients over 100k memories the hop cost a quarter of the
throughput (make bench). The engine takes concurrent reads and
writes (Qdrant's segments are locked inside); a read may see part of a batch
being upserted, each point whole.

The service never optimizes its shard: the optimizer holds the GIL
throughout (154 s for a 100,000-point segment, during which no other thread
of the process ran). Only `memstream rebuild index` does, offline, a stretch
at a time (services/rebuild/index.py): optimized segments answer a filtered
query in ~0.3 ms at a million points, one appendable segment of them all in
~0.5 ms once warm and ~5 ms before. With `default_segment_number` high the
optimizer indexes each stretch on its own and never merges the segments,
which once mapped 13.8 GiB for a million memories.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar
from uuid import UUID

import qdrant_edge as qe

from services.core.errors import StackError
from services.stores.qdrant_errors import qdrant_call
from services.stores.vector import (
    DENSE,
    DENSE_CTX,
    OUTDATED_INDEX,
    SCOPE_PAGE,
    SPARSE,
    SPARSE_CTX,
    Hit,
    IndexedMemory,
    Legs,
    PayloadVersions,
    Scope,
    Sparse,
    as_legs,
    leg_queries,
    payloads_in_scope,
    require_scope,
)

_KEYWORD_FIELDS = ("tenant_id", "user_id", "type", "status")
# A bulk build's optimizer: more segments than a build makes, so it never merges them (services/rebuild/index.py).
_BULK_SEGMENTS = 64
R = TypeVar("R")


def _user_filter(tenant_id: str, user_id: str) -> qe.Filter:
    require_scope(tenant_id, user_id)
    return qe.Filter(
        must=[
            qe.FieldCondition(key="tenant_id", match=qe.MatchValue(tenant_id)),
            qe.FieldCondition(key="user_id", match=qe.MatchValue(user_id)),
        ]
    )


def _scope_filter(scope: Scope) -> qe.Filter:
    must: list[Any] = [
        qe.FieldCondition(key="tenant_id", match=qe.MatchValue(scope.tenant_id)),
        qe.FieldCondition(key="user_id", match=qe.MatchValue(scope.user_id)),
        qe.FieldCondition(key="status", match=qe.MatchValue("active")),
    ]
    if scope.types:
        must.append(qe.FieldCondition(key="type", match=qe.MatchAny(list(scope.types))))
    return qe.Filter(must=must)


def _made_before_context(path: Path) -> bool:
    """An existing shard whose stored config has no context vectors."""
    stored = path / "edge_config.json"
    return stored.exists() and DENSE_CTX not in json.loads(stored.read_text()).get("vectors", {})


def _query(q: list[float] | Sparse) -> Any:
    return qe.SparseVector(q.indices, q.values) if isinstance(q, Sparse) else q


def _vectors(p: IndexedMemory) -> dict[str, Any]:
    """The point's named vectors in the engine's types; those it lacks are left out (not in that leg)."""
    return {name: _query(vec) for name, vec in p.named_vectors().items()}


def _blank_and_delete(shard: qe.EdgeShard, ids: list[int | UUID | str]) -> None:
    """Delete points so that they leave BM25's IDF at once (services.stores.vector: deleting a point)."""
    if ids:
        shard.update(qe.UpdateOperation.upsert_points([qe.Point(i, {}, {}) for i in ids]))
        shard.update(qe.UpdateOperation.delete_points(ids))


def private_dir(path: Path) -> None:
    """`path` and every directory created for it are 0700: the shard holds every memory's text in clear.

    `mkdir(mode=...)` gives parents the default mode and is cut by the umask,
    so each missing level is created and then set; an existing shard made
    before this rule is narrowed too.
    """
    missing = [p for p in (path, *path.parents) if not p.exists()]
    for level in reversed(missing):
        level.mkdir(mode=0o700, exist_ok=True)
        level.chmod(0o700)
    path.chmod(0o700)


class EdgeIndex(PayloadVersions):
    """`cold`: for a bulk build (services/rebuild/index.py): the shard's vectors are mapped without being
    read in when it opens, so reopening it lets go of what the build wrote, and its optimizer indexes each
    stretch without merging segments. Those segments stay cold (each keeps the placement it was built with),
    so the service maps a user's points on that user's first recall; a shard opened without `cold` writes
    its new segments cached."""

    def __init__(self, path: Path, *, cold: bool = False) -> None:
        self._path = path
        self._cold = cold
        self._config: qe.EdgeConfig | None = None
        self._shard: qe.EdgeShard | None = None
        self._owner = ThreadPoolExecutor(max_workers=1, thread_name_prefix="qdrant-edge")

    @property
    def shard(self) -> qe.EdgeShard:
        if self._shard is None:
            raise RuntimeError("EdgeIndex.ensure() was not called")
        return self._shard

    async def _on_owner(self, operation: str, call: Callable[[], R]) -> R:
        async with qdrant_call(operation):
            return await asyncio.get_running_loop().run_in_executor(self._owner, call)

    async def ensure(self, dimension: int) -> None:
        """Open the shard, or create it with every vector of services.stores.vector.

        A shard made before the context vectors existed cannot take them (the
        engine refuses a config with vectors its segments lack): it is refused
        here with what to do (OUTDATED_INDEX) instead of the engine's error.
        """
        if _made_before_context(self._path):
            raise StackError(OUTDATED_INDEX.format(where=self._path))
        dense = qe.EdgeVectorParams(
            size=dimension,
            distance=qe.Distance.Cosine,
            memory=qe.Memory.Cold if self._cold else qe.Memory.Cached,
        )
        config = self._config = qe.EdgeConfig(
            vectors={DENSE: dense, DENSE_CTX: dense},
            sparse_vectors={
                SPARSE: qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf),
                SPARSE_CTX: qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf),
            },
            optimizers=qe.EdgeOptimizersConfig(default_segment_number=_BULK_SEGMENTS) if self._cold else None,
        )

        def open_or_create() -> qe.EdgeShard:
            private_dir(self._path)
            if (self._path / "edge_config.json").exists() or any(self._path.glob("segments*")):
                return qe.EdgeShard.load(str(self._path), config)
            shard = qe.EdgeShard.create(str(self._path), config)
            for name in _KEYWORD_FIELDS:
                shard.update(qe.UpdateOperation.create_field_index(name, qe.PayloadSchemaType.Keyword))
            return shard

        self._shard = await self._on_owner("open", open_or_create)

    async def reopen(self) -> None:
        """Flush, close and load the shard again: a cold shard lets go of the pages its writes mapped."""
        shard, config = self.shard, self._config

        def cycle() -> qe.EdgeShard:
            shard.flush()
            shard.close()
            return qe.EdgeShard.load(str(self._path), config)

        self._shard = await self._on_owner("reopen", cycle)

    async def upsert(self, points: Sequence[IndexedMemory]) -> None:
        if not points:
            return
        edge_points = [qe.Point(p.id, _vectors(p), dict(p.payload)) for p in points]
        shard = self.shard
        await self._on_owner("upsert", lambda: shard.update(qe.UpdateOperation.upsert_points(edge_points)))

    async def delete(self, ids: Sequence[str]) -> None:
        if ids:
            shard = self.shard
            wanted: list[int | UUID | str] = list(ids)
            await self._on_owner("delete", lambda: _blank_and_delete(shard, wanted))

    async def delete_scope(self, tenant_id: str, user_id: str) -> None:
        flt, shard = _user_filter(tenant_id, user_id), self.shard

        def delete_all() -> None:
            offset: Any = None
            while True:
                request = qe.ScrollRequest(
                    offset=offset, limit=SCOPE_PAGE, filter=flt, with_payload=False, with_vector=False
                )
                records, offset = shard.scroll(request)
                _blank_and_delete(shard, [r.id for r in records])
                if offset is None:
                    break
            shard.update(qe.UpdateOperation.delete_points_by_filter(flt))  # whatever a scroll page missed

        await self._on_owner("delete_scope", delete_all)

    async def count_scope(self, tenant_id: str, user_id: str) -> int:
        flt, shard = _user_filter(tenant_id, user_id), self.shard
        return int(await self._on_owner("count_scope", lambda: shard.count(qe.CountRequest(exact=True, filter=flt))))

    async def payloads(self, tenant_id: str, user_id: str, ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        require_scope(tenant_id, user_id)
        if not ids:
            return {}
        shard = self.shard
        wanted: list[int | UUID | str] = list(ids)
        records = await self._on_owner("payloads", lambda: shard.retrieve(wanted, True, False))
        return payloads_in_scope(((str(r.id), r.payload) for r in records), tenant_id, user_id)

    async def legs(self, scope: Scope, dense: list[float], sparse: Sparse, limit: int) -> Legs:
        """Every leg as one batch on the caller's loop (see the module doc): ids and scores only.

        Reading payloads is most of what a query costs, and it is where the
        engine lets go of the GIL and must wait to take it back (under
        concurrent recalls, often a whole switch interval each time): recall
        reads what it shows from Postgres instead, in the round trip it makes
        anyway (services/api/recall.py).
        """
        flt = _scope_filter(scope)
        queries = leg_queries(dense, sparse)
        batch = qe.QueryBatchRequest(
            [
                qe.QueryRequest(
                    limit=limit, query=qe.Query.Nearest(_query(q), using=name), filter=flt, with_payload=False
                )
                for name, q in queries
            ]
        )
        async with qdrant_call("search"):
            found = self.shard.query_batch(batch)
            return as_legs(
                [name for name, _ in queries], [[Hit(str(p.id), float(p.score)) for p in leg] for leg in found]
            )

    async def context_vectors(self, ids: Sequence[str]) -> dict[str, list[float]]:
        if not ids:
            return {}
        shard = self.shard
        wanted: list[int | UUID | str] = list(ids)
        records = await self._on_owner("context_vectors", lambda: shard.retrieve(wanted, False, [DENSE_CTX]))
        out: dict[str, list[float]] = {}
        for r in records:
            vectors = r.vector
            if isinstance(vectors, dict) and isinstance(vec := vectors.get(DENSE_CTX), list):
                out[str(r.id)] = [float(x) for x in vec if isinstance(x, float | int)]
        return out

    async def count(self) -> int:
        shard = self.shard
        return int(await self._on_owner("count", lambda: shard.count(qe.CountRequest(exact=True))))

    async def ping(self) -> bool:
        return self._shard is not None

    async def optimize(self) -> None:
        """Index what was written since the last optimize (holds the GIL throughout: offline builds only)."""
        shard = self.shard
        await self._on_owner("optimize", shard.optimize)

    async def close(self) -> None:
        """Flush and close on the owner thread, after every call queued before it."""
        if self._shard is not None:
            shard, self._shard = self._shard, None

            def flush_and_close() -> None:
                shard.flush()
                shard.close()

            await self._on_owner("close", flush_and_close)
        self._owner.shutdown(wait=True)
