"""The recall index: one interface, two engines (Qdrant Edge in-process, Qdrant server).

Points carry a dense vector ("dense") and a BM25 sparse vector ("bm25"), so
recall can fuse meaning and exact words (by score: services.stores.fusion). The BM25 weights are computed here
with the Qdrant engine's own tokenizer, identically for both engines.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, Required, TypedDict

if TYPE_CHECKING:
    from services.stores.fusion import FusionWeights

DENSE = "dense"
SPARSE = "bm25"


@dataclass(frozen=True)
class Sparse:
    indices: list[int]
    values: list[float]


class IndexPayload(TypedDict, total=False):
    """What a point carries: the filter fields, and enough to rank and show a hit without Postgres."""

    tenant_id: Required[str]
    user_id: Required[str]
    type: Required[str]
    status: Required[str]
    text: Required[str]
    category: str | None
    key_name: str | None
    value: str | None
    importance: float
    access_count: int
    observed_at: str  # ISO 8601
    observed_ts: float  # epoch seconds, for range filters
    entities: list[str]
    source: dict[str, Any]  # Provenance as JSON
    version: int
    last_accessed_at: str | None  # ISO 8601, None until a recall returns the memory
    compressed: bool  # folded into a pattern: left out of default recall


@dataclass(frozen=True)
class IndexedMemory:
    id: str
    dense: list[float]
    sparse: Sparse
    payload: IndexPayload


@dataclass(frozen=True)
class Scope:
    """Who is asking: every search is filtered by both, no exceptions."""

    tenant_id: str
    user_id: str
    types: tuple[str, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        require_scope(self.tenant_id, self.user_id)


def require_scope(tenant_id: str, user_id: str) -> None:
    """A delete or count by scope with an empty id would reach every user's points."""
    if not tenant_id or not user_id:
        raise ValueError("a scope needs both tenant_id and user_id")


@dataclass(frozen=True)
class Hit:
    id: str
    score: float
    payload: dict[str, Any]


class VectorIndex(Protocol):
    async def ensure(self, dimension: int) -> None: ...
    async def upsert(self, points: Sequence[IndexedMemory]) -> None: ...
    async def delete(self, ids: Sequence[str]) -> None: ...
    # Every point of one tenant's user, whatever its status or type: forgetting a user.
    async def delete_scope(self, tenant_id: str, user_id: str) -> None: ...
    async def count_scope(self, tenant_id: str, user_id: str) -> int: ...
    # The payload version of those of `ids` the index holds for this tenant and user:
    # how a client waiting on its own write sees that the index caught up.
    async def versions(self, tenant_id: str, user_id: str, ids: Sequence[str]) -> dict[str, int]: ...
    async def search(
        self, scope: Scope, dense: list[float], sparse: Sparse, limit: int, weights: FusionWeights = ...
    ) -> list[Hit]: ...
    async def count(self) -> int: ...
    async def ping(self) -> bool: ...
    async def close(self) -> None: ...


def versions_in_scope(
    points: Iterable[tuple[str, Mapping[str, Any] | None]], tenant_id: str, user_id: str
) -> dict[str, int]:
    """Point id → payload version, for the points of this tenant and user only (ids are global)."""
    return {
        pid: int(payload.get("version", 0))
        for pid, payload in points
        if payload is not None and payload.get("tenant_id") == tenant_id and payload.get("user_id") == user_id
    }


class Bm25Encoder:
    """Sparse BM25 term weights from the Qdrant engine's tokenizer and stemmer."""

    def __init__(self) -> None:
        import qdrant_edge

        self._model = qdrant_edge.Bm25(qdrant_edge.Bm25Config(language="english", avg_len=40.0))

    def document(self, text: str) -> Sparse:
        vec = self._model.embed_document(text)
        return Sparse(list(vec.indices), list(vec.values))

    def query(self, text: str) -> Sparse:
        vec = self._model.embed_query(text)
        return Sparse(list(vec.indices), list(vec.values))
