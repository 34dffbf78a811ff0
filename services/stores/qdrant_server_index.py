"""Qdrant server through qdrant-client, for production (docker-compose).

Tests run it against qdrant-client's in-memory mode, which speaks the same
client API (it is a brute-force engine, so never a serving option).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import SecretStr
from qdrant_client import AsyncQdrantClient, models

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


def _query(q: list[float] | Sparse) -> list[float] | models.SparseVector:
    return models.SparseVector(indices=q.indices, values=q.values) if isinstance(q, Sparse) else q


def _vectors(p: IndexedMemory) -> dict[str, list[float] | models.SparseVector]:
    """The point's named vectors in the client's types; those it lacks are left out (not in that leg)."""
    return {name: _query(vec) for name, vec in p.named_vectors().items()}


def server_client(url: str, api_key: SecretStr | None = None) -> AsyncQdrantClient:
    """A client of the Qdrant server at `url` (":memory:": qdrant-client's in-process engine, for tests).

    The API key (MEMSTREAM_QDRANT_API_KEY, the server's `service.api_key`)
    stays a SecretStr until it is handed to the client, so no repr or log of
    the settings shows it.
    """
    if url == ":memory:":
        return AsyncQdrantClient(location=":memory:")
    return AsyncQdrantClient(url=url, api_key=None if api_key is None else api_key.get_secret_value())


class ServerIndex(PayloadVersions):
    def __init__(self, url: str, collection: str, api_key: SecretStr | None = None) -> None:
        self._client = server_client(url, api_key)
        self._collection = collection

    async def ensure(self, dimension: int) -> None:
        """Create the collection with every vector of services.stores.vector, or check the one there has them.

        A collection made before the context vectors existed cannot get them
        (Qdrant adds no named vectors to a collection): refused with what to do.
        """
        if await self._client.collection_exists(self._collection):
            info = await self._client.get_collection(self._collection)
            dense = info.config.params.vectors
            if not isinstance(dense, dict) or DENSE_CTX not in dense:
                raise StackError(OUTDATED_INDEX.format(where=f"collection {self._collection!r}"))
            return
        dense_params = models.VectorParams(size=dimension, distance=models.Distance.COSINE)
        sparse_params = models.SparseVectorParams(modifier=models.Modifier.IDF)
        await self._client.create_collection(
            self._collection,
            vectors_config={DENSE: dense_params, DENSE_CTX: dense_params},
            sparse_vectors_config={SPARSE: sparse_params, SPARSE_CTX: sparse_params},
        )
        for name in ("tenant_id", "user_id", "type", "status"):
            await self._client.create_payload_index(self._collection, name, models.PayloadSchemaType.KEYWORD)

    async def upsert(self, points: Sequence[IndexedMemory]) -> None:
        if not points:
            return
        async with qdrant_call("upsert"):
            await self._client.upsert(
                self._collection,
                points=[models.PointStruct(id=p.id, vector=_vectors(p), payload=p.payload) for p in points],
            )

    async def delete(self, ids: Sequence[str]) -> None:
        if ids:
            async with qdrant_call("delete"):
                await self._blank_and_delete(list(ids))

    async def _blank_and_delete(self, ids: list[models.ExtendedPointId]) -> None:
        """Delete points so that they leave BM25's IDF at once (services.stores.vector: deleting a point)."""
        blanks = [models.PointStruct(id=i, vector={}, payload={}) for i in ids]
        await self._client.upsert(self._collection, points=blanks)
        await self._client.delete(self._collection, points_selector=models.PointIdsList(points=ids))

    async def delete_scope(self, tenant_id: str, user_id: str) -> None:
        flt = _user_filter(tenant_id, user_id)
        offset: Any = None
        async with qdrant_call("delete_scope"):
            while True:
                points, offset = await self._client.scroll(
                    self._collection, scroll_filter=flt, limit=SCOPE_PAGE, offset=offset, with_payload=False
                )
                if points:
                    await self._blank_and_delete([p.id for p in points])
                if offset is None:
                    break
            # Whatever a scroll page missed.
            await self._client.delete(self._collection, points_selector=models.FilterSelector(filter=flt))

    async def count_scope(self, tenant_id: str, user_id: str) -> int:
        flt = _user_filter(tenant_id, user_id)
        async with qdrant_call("count_scope"):
            return (await self._client.count(self._collection, count_filter=flt, exact=True)).count

    async def payloads(self, tenant_id: str, user_id: str, ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        require_scope(tenant_id, user_id)
        if not ids:
            return {}
        async with qdrant_call("payloads"):
            found = await self._client.retrieve(self._collection, ids=list(ids), with_payload=True, with_vectors=False)
        return payloads_in_scope(((str(p.id), p.payload) for p in found), tenant_id, user_id)

    async def legs(self, scope: Scope, dense: list[float], sparse: Sparse, limit: int) -> Legs:
        """Every leg in one round trip (a batch query: the server runs them concurrently)."""
        flt = _scope_filter(scope)
        queries = leg_queries(dense, sparse)
        requests = [
            models.QueryRequest(query=_query(q), using=name, filter=flt, limit=limit, with_payload=False)
            for name, q in queries
        ]
        async with qdrant_call("search"):
            found = await self._client.query_batch_points(self._collection, requests=requests)
        hits = [[Hit(str(p.id), float(p.score)) for p in leg.points] for leg in found]
        return as_legs([name for name, _ in queries], hits)

    async def context_vectors(self, ids: Sequence[str]) -> dict[str, list[float]]:
        if not ids:
            return {}
        async with qdrant_call("context_vectors"):
            found = await self._client.retrieve(
                self._collection, ids=list(ids), with_payload=False, with_vectors=[DENSE_CTX]
            )
        out: dict[str, list[float]] = {}
        for p in found:
            vec = p.vector.get(DENSE_CTX) if isinstance(p.vector, dict) else None
            if isinstance(vec, list):
                out[str(p.id)] = [float(x) for x in vec if isinstance(x, float | int)]
        return out

    async def count(self) -> int:
        async with qdrant_call("count"):
            return (await self._client.count(self._collection, exact=True)).count

    async def ping(self) -> bool:
        async with qdrant_call("ping"):
            await self._client.get_collections()
        return True

    async def close(self) -> None:
        await self._client.close()
