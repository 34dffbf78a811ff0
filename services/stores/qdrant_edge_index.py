"""Qdrant Edge: the Qdrant engine in-process, for the embedded default.

A shard directory has a single owner, which is why `memstream up` runs the
worker and the read service in one process.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import qdrant_edge as qe

from services import metrics
from services.stores.vector import DENSE, SPARSE, Hit, IndexedMemory, Scope, Sparse

_KEYWORD_FIELDS = ("tenant_id", "user_id", "type", "status")


def _scope_filter(scope: Scope) -> qe.Filter:
    must: list[Any] = [
        qe.FieldCondition(key="tenant_id", match=qe.MatchValue(scope.tenant_id)),
        qe.FieldCondition(key="user_id", match=qe.MatchValue(scope.user_id)),
        qe.FieldCondition(key="status", match=qe.MatchValue("active")),
    ]
    if scope.types:
        must.append(qe.FieldCondition(key="type", match=qe.MatchAny(list(scope.types))))
    return qe.Filter(must=must)


class EdgeIndex:
    def __init__(self, path: Path) -> None:
        self._path = path
        self._shard: qe.EdgeShard | None = None
        self._lock = asyncio.Lock()

    @property
    def shard(self) -> qe.EdgeShard:
        if self._shard is None:
            raise RuntimeError("EdgeIndex.ensure() was not called")
        return self._shard

    async def ensure(self, dimension: int) -> None:
        config = qe.EdgeConfig(
            vectors={DENSE: qe.EdgeVectorParams(size=dimension, distance=qe.Distance.Cosine)},
            sparse_vectors={SPARSE: qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf)},
        )
        if (self._path / "edge_config.json").exists() or any(self._path.glob("segments*")):
            self._shard = qe.EdgeShard.load(str(self._path), config)
            return
        self._path.mkdir(parents=True, exist_ok=True)
        self._shard = qe.EdgeShard.create(str(self._path), config)
        for name in _KEYWORD_FIELDS:
            self._shard.update(qe.UpdateOperation.create_field_index(name, qe.PayloadSchemaType.Keyword))

    async def upsert(self, points: Sequence[IndexedMemory]) -> None:
        if not points:
            return
        edge_points = [
            qe.Point(p.id, {DENSE: p.dense, SPARSE: qe.SparseVector(p.sparse.indices, p.sparse.values)}, p.payload)
            for p in points
        ]
        await self._timed("upsert", lambda: self.shard.update(qe.UpdateOperation.upsert_points(edge_points)))

    async def delete(self, ids: Sequence[str]) -> None:
        if ids:
            await self._timed("delete", lambda: self.shard.update(qe.UpdateOperation.delete_points(list(ids))))

    async def search(self, scope: Scope, dense: list[float], sparse: Sparse, limit: int) -> list[Hit]:
        flt = _scope_filter(scope)
        prefetches = [qe.Prefetch(limit=limit, query=qe.Query.Nearest(dense, using=DENSE), filter=flt)]
        if sparse.indices:
            sparse_vec = qe.SparseVector(sparse.indices, sparse.values)
            prefetches.append(qe.Prefetch(limit=limit, query=qe.Query.Nearest(sparse_vec, using=SPARSE), filter=flt))
        request = qe.QueryRequest(
            limit=limit,
            prefetches=prefetches,
            query=qe.Fusion.Rrf(k=60),  # type: ignore[arg-type]  # the stub lists Fusion, not its variants
            filter=flt,
            with_payload=True,
        )
        started = time.perf_counter()
        # Updates run in a worker thread; queries wait for them, so a read
        # never sees half of a batch.
        async with self._lock:
            points = self.shard.query(request)
        metrics.STORE_LATENCY.labels(store="qdrant", operation="search").observe(time.perf_counter() - started)
        return [Hit(str(p.id), float(p.score), dict(p.payload or {})) for p in points]

    async def count(self) -> int:
        return int(self.shard.count(qe.CountRequest(exact=True)))

    async def ping(self) -> bool:
        return self._shard is not None

    async def optimize(self) -> None:
        await asyncio.to_thread(self.shard.optimize)

    async def close(self) -> None:
        if self._shard is not None:
            self._shard.flush()
            self._shard.close()
            self._shard = None

    async def _timed(self, operation: str, call: Any) -> None:
        started = time.perf_counter()
        async with self._lock:
            try:
                await asyncio.to_thread(call)
            except Exception:
                metrics.STORE_ERRORS.labels(store="qdrant", operation=operation).inc()
                raise
        metrics.STORE_LATENCY.labels(store="qdrant", operation=operation).observe(time.perf_counter() - started)
