"""Qdrant Edge: the Qdrant engine in-process, for the embedded default.

A shard directory has a single owner, which is why `memstream up` runs the
worker and the read service in one process. Inside the process the shard
has a single thread: every call (updates, queries, flush, close) runs on it,
in arrival order. That keeps the engine off the event loop that six agents
and the HTTP server share (a query over 100k points is milliseconds), makes
the engine's thread-safety a non-question, and means a read never sees half
of a batch.
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

from services.errors import StackError
from services.stores.fusion import FusedSearch
from services.stores.qdrant_errors import qdrant_call
from services.stores.vector import (
    DENSE,
    DENSE_CTX,
    OUTDATED_INDEX,
    SPARSE,
    SPARSE_CTX,
    Hit,
    IndexedMemory,
    Legs,
    Scope,
    Sparse,
    as_legs,
    leg_queries,
    require_scope,
    versions_in_scope,
)

_KEYWORD_FIELDS = ("tenant_id", "user_id", "type", "status")
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


class EdgeIndex(FusedSearch):
    def __init__(self, path: Path) -> None:
        self._path = path
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
        dense = qe.EdgeVectorParams(size=dimension, distance=qe.Distance.Cosine)
        config = qe.EdgeConfig(
            vectors={DENSE: dense, DENSE_CTX: dense},
            sparse_vectors={
                SPARSE: qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf),
                SPARSE_CTX: qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf),
            },
        )

        def open_or_create() -> qe.EdgeShard:
            if (self._path / "edge_config.json").exists() or any(self._path.glob("segments*")):
                return qe.EdgeShard.load(str(self._path), config)
            self._path.mkdir(parents=True, exist_ok=True)
            shard = qe.EdgeShard.create(str(self._path), config)
            for name in _KEYWORD_FIELDS:
                shard.update(qe.UpdateOperation.create_field_index(name, qe.PayloadSchemaType.Keyword))
            return shard

        if _made_before_context(self._path):
            raise StackError(OUTDATED_INDEX.format(where=self._path))
        self._shard = await self._on_owner("open", open_or_create)

    async def upsert(self, points: Sequence[IndexedMemory]) -> None:
        if not points:
            return
        edge_points = [qe.Point(p.id, _vectors(p), dict(p.payload)) for p in points]
        shard = self.shard
        await self._on_owner("upsert", lambda: shard.update(qe.UpdateOperation.upsert_points(edge_points)))

    async def delete(self, ids: Sequence[str]) -> None:
        if ids:
            shard = self.shard
            await self._on_owner("delete", lambda: shard.update(qe.UpdateOperation.delete_points(list(ids))))

    async def delete_scope(self, tenant_id: str, user_id: str) -> None:
        flt, shard = _user_filter(tenant_id, user_id), self.shard
        await self._on_owner("delete_scope", lambda: shard.update(qe.UpdateOperation.delete_points_by_filter(flt)))

    async def count_scope(self, tenant_id: str, user_id: str) -> int:
        flt, shard = _user_filter(tenant_id, user_id), self.shard
        return int(await self._on_owner("count_scope", lambda: shard.count(qe.CountRequest(exact=True, filter=flt))))

    async def versions(self, tenant_id: str, user_id: str, ids: Sequence[str]) -> dict[str, int]:
        require_scope(tenant_id, user_id)
        if not ids:
            return {}
        shard = self.shard
        wanted: list[int | UUID | str] = list(ids)
        records = await self._on_owner("versions", lambda: shard.retrieve(wanted, True, False))
        return versions_in_scope(((str(r.id), r.payload) for r in records), tenant_id, user_id)

    async def legs(self, scope: Scope, dense: list[float], sparse: Sparse, limit: int) -> Legs:
        """Every leg in one call on the owner thread (one queue slot, one hop off the event loop).

        The legs are planned as one batch and return ids and scores only; the
        payloads are then read once per distinct point. Reading payloads is
        most of a query's cost, and the legs return many points twice (a
        point near the query is near it in more than one leg).
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
        shard = self.shard

        def search() -> list[list[Hit]]:
            scored = [[(str(p.id), float(p.score)) for p in points] for points in shard.query_batch(batch)]
            wanted: list[int | UUID | str] = list({pid for leg in scored for pid, _ in leg})
            payloads = {str(r.id): dict(r.payload or {}) for r in shard.retrieve(wanted, True, False)}
            # Both reads run in this one call on the owner thread: no update comes between them.
            return [[Hit(pid, score, payloads[pid]) for pid, score in leg if pid in payloads] for leg in scored]

        return as_legs([name for name, _ in queries], await self._on_owner("search", search))

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
