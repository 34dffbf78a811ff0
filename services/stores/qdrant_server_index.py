"""Qdrant server through qdrant-client, for production (docker-compose).

Tests run it against qdrant-client's in-memory mode, which speaks the same
client API (it is a brute-force engine, so never a serving option).
"""

from __future__ import annotations

from collections.abc import Sequence

from qdrant_client import AsyncQdrantClient, models

from services.stores.fusion import DEFAULT_FUSION, FusionWeights, fuse
from services.stores.qdrant_errors import qdrant_call
from services.stores.vector import DENSE, SPARSE, Hit, IndexedMemory, Scope, Sparse, require_scope, versions_in_scope


def _user_filter(tenant_id: str, user_id: str) -> models.Filter:
    require_scope(tenant_id, user_id)
    return models.Filter(
        must=[
            models.FieldCondition(key="tenant_id", match=models.MatchValue(value=tenant_id)),
            models.FieldCondition(key="user_id", match=models.MatchValue(value=user_id)),
        ]
    )


def _scope_filter(scope: Scope) -> models.Filter:
    must: list[models.Condition] = [
        models.FieldCondition(key="tenant_id", match=models.MatchValue(value=scope.tenant_id)),
        models.FieldCondition(key="user_id", match=models.MatchValue(value=scope.user_id)),
        models.FieldCondition(key="status", match=models.MatchValue(value="active")),
    ]
    if scope.types:
        must.append(models.FieldCondition(key="type", match=models.MatchAny(any=list(scope.types))))
    return models.Filter(must=must)


class ServerIndex:
    def __init__(self, url: str, collection: str) -> None:
        self._client = AsyncQdrantClient(location=":memory:") if url == ":memory:" else AsyncQdrantClient(url=url)
        self._collection = collection

    async def ensure(self, dimension: int) -> None:
        if await self._client.collection_exists(self._collection):
            return
        await self._client.create_collection(
            self._collection,
            vectors_config={DENSE: models.VectorParams(size=dimension, distance=models.Distance.COSINE)},
            sparse_vectors_config={SPARSE: models.SparseVectorParams(modifier=models.Modifier.IDF)},
        )
        for name in ("tenant_id", "user_id", "type", "status"):
            await self._client.create_payload_index(self._collection, name, models.PayloadSchemaType.KEYWORD)

    async def upsert(self, points: Sequence[IndexedMemory]) -> None:
        if not points:
            return
        async with qdrant_call("upsert"):
            await self._client.upsert(
                self._collection,
                points=[
                    models.PointStruct(
                        id=p.id,
                        vector={
                            DENSE: p.dense,
                            SPARSE: models.SparseVector(indices=p.sparse.indices, values=p.sparse.values),
                        },
                        payload=p.payload,
                    )
                    for p in points
                ],
            )

    async def delete(self, ids: Sequence[str]) -> None:
        if ids:
            async with qdrant_call("delete"):
                await self._client.delete(self._collection, points_selector=models.PointIdsList(points=list(ids)))

    async def delete_scope(self, tenant_id: str, user_id: str) -> None:
        selector = models.FilterSelector(filter=_user_filter(tenant_id, user_id))
        async with qdrant_call("delete_scope"):
            await self._client.delete(self._collection, points_selector=selector)

    async def count_scope(self, tenant_id: str, user_id: str) -> int:
        flt = _user_filter(tenant_id, user_id)
        async with qdrant_call("count_scope"):
            return (await self._client.count(self._collection, count_filter=flt, exact=True)).count

    async def versions(self, tenant_id: str, user_id: str, ids: Sequence[str]) -> dict[str, int]:
        require_scope(tenant_id, user_id)
        if not ids:
            return {}
        async with qdrant_call("versions"):
            found = await self._client.retrieve(self._collection, ids=list(ids), with_payload=True, with_vectors=False)
        return versions_in_scope(((str(p.id), p.payload) for p in found), tenant_id, user_id)

    async def search(
        self, scope: Scope, dense: list[float], sparse: Sparse, limit: int, weights: FusionWeights = DEFAULT_FUSION
    ) -> list[Hit]:
        """Both legs in one round trip, fused here (services.stores.fusion)."""
        flt = _scope_filter(scope)
        requests = [models.QueryRequest(query=dense, using=DENSE, filter=flt, limit=limit, with_payload=True)]
        if sparse.indices:
            requests.append(
                models.QueryRequest(
                    query=models.SparseVector(indices=sparse.indices, values=sparse.values),
                    using=SPARSE,
                    filter=flt,
                    limit=limit,
                    with_payload=True,
                )
            )
        async with qdrant_call("search"):
            legs = await self._client.query_batch_points(self._collection, requests=requests)
        hits = [[Hit(str(p.id), float(p.score), dict(p.payload or {})) for p in leg.points] for leg in legs]
        return fuse(hits[0], hits[1] if len(hits) > 1 else [], weights, limit)

    async def count(self) -> int:
        async with qdrant_call("count"):
            return (await self._client.count(self._collection, exact=True)).count

    async def ping(self) -> bool:
        async with qdrant_call("ping"):
            await self._client.get_collections()
        return True

    async def close(self) -> None:
        await self._client.close()
