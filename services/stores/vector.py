"""The recall index: one interface, two engines (Qdrant Edge in-process, Qdrant server).

Every point carries its own text as a dense vector ("dense") and a BM25
sparse vector ("bm25"). An exchange (one turn) also carries its backward
context: a dense vector of the turn before it and the turn ("dense_ctx") and
a BM25 vector of the two turns before it and the turn ("bm25_ctx"). Recall
queries the four legs and fuses them by score (services.stores.fusion); a
point without context vectors simply is not in those two legs.

BM25 is real BM25 split between us and the engine: the term weights of a
document (tf saturation k1, length normalisation b against an average
length, English stopwords and Snowball stemming from the Qdrant engine's own
tokenizer) are computed here, identically for both engines and for
documents and queries; the IDF comes from the index (the sparse vectors are
declared with Qdrant's IDF modifier), so it follows the collection as it
grows. Changing k1, b or the average lengths changes every document's
weights: `memstream rebuild index` re-encodes them.

Deleting a point: the engine's IDF counts every point that holds a sparse
vector, deleted ones too, until their segment is rewritten (the embedded
shard never is while it serves). Both engines therefore first overwrite a
point they delete with an empty one (no vectors, no payload), which leaves
the counts at once, and then delete it. So the IDF is always that of the
active memories: the live index ranks as one rebuilt from Postgres does, and
superseded, deleted and forgotten memories stop weighing in anyone's recall.
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Protocol, Required, TypedDict

if TYPE_CHECKING:
    from services.core.config import Settings

DENSE = "dense"
SPARSE = "bm25"
DENSE_CTX = "dense_ctx"
SPARSE_CTX = "bm25_ctx"
VECTOR_NAMES = (DENSE, SPARSE, DENSE_CTX, SPARSE_CTX)
# Points a forget reads and deletes at a time (delete_scope: each is blanked first, see above).
SCOPE_PAGE = 1000
# How many of an exchange's context turns (the last ones) its dense context vector reads: the turn before
# it only (MiniLM reads ~256 word pieces; a third turn mostly dilutes the pair). BM25 reads them all.
DENSE_CONTEXT_TURNS = 1


def dense_context_text(context: Sequence[str], text: str) -> str:
    """What the dense context vector embeds: the last DENSE_CONTEXT_TURNS context turns and the text."""
    return "\n".join([*context[len(context) - DENSE_CONTEXT_TURNS :], text]) if context else text


def sparse_context_text(context: Sequence[str], text: str) -> str:
    """What the BM25 context vector encodes: every context turn and the text."""
    return "\n".join([*context, text])


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
    has_context: bool  # in the context legs (an exchange with turns before it)


@dataclass(frozen=True)
class IndexedMemory:
    id: str
    dense: list[float]
    sparse: Sparse
    payload: IndexPayload
    # Context legs (exchanges only); None: the point is not in that leg.
    dense_ctx: list[float] | None = None
    sparse_ctx: Sparse | None = None

    def named_vectors(self) -> dict[str, list[float] | Sparse]:
        """The point's vectors by name, the context ones only when present (an empty sparse one is left out)."""
        named: dict[str, list[float] | Sparse] = {DENSE: self.dense, SPARSE: self.sparse}
        if self.dense_ctx is not None:
            named[DENSE_CTX] = self.dense_ctx
        if self.sparse_ctx is not None and self.sparse_ctx.indices:
            named[SPARSE_CTX] = self.sparse_ctx
        return named


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


NO_PAYLOAD: Mapping[str, Any] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class Hit:
    """A point and its score; `payload` is empty where only ids and scores were asked for (`VectorIndex.legs`)."""

    id: str
    score: float
    payload: Mapping[str, Any] = field(default_factory=lambda: NO_PAYLOAD)


@dataclass(frozen=True)
class Legs:
    """Each recall leg's top hits, best first, as the engine scored them (cosine, BM25)."""

    dense: list[Hit] = field(default_factory=list)
    sparse: list[Hit] = field(default_factory=list)
    dense_ctx: list[Hit] = field(default_factory=list)
    sparse_ctx: list[Hit] = field(default_factory=list)

    def all(self) -> tuple[list[Hit], list[Hit], list[Hit], list[Hit]]:
        return self.dense, self.sparse, self.dense_ctx, self.sparse_ctx

    def ids(self) -> list[str]:
        """Every point any leg returned, once each."""
        return list({h.id: None for leg in self.all() for h in leg})

    def restricted(self, keep: Container[str]) -> Legs:
        """Only the hits whose id is in `keep` (the others dropped from each leg, the order kept)."""
        return Legs(*([h for h in leg if h.id in keep] for leg in self.all()))


def leg_queries(dense: list[float], sparse: Sparse) -> list[tuple[str, list[float] | Sparse]]:
    """(vector name, query) of every leg to run, in Legs order; a query without BM25 terms skips the BM25 legs."""
    legs: list[tuple[str, list[float] | Sparse]] = [(DENSE, dense)]
    if sparse.indices:
        legs.append((SPARSE, sparse))
    legs.append((DENSE_CTX, dense))
    if sparse.indices:
        legs.append((SPARSE_CTX, sparse))
    return legs


def as_legs(names: Sequence[str], results: Sequence[list[Hit]]) -> Legs:
    """The engine's answers to `leg_queries` (same order) as Legs."""
    by_name = dict(zip(names, results, strict=True))
    return Legs(
        dense=by_name.get(DENSE, []),
        sparse=by_name.get(SPARSE, []),
        dense_ctx=by_name.get(DENSE_CTX, []),
        sparse_ctx=by_name.get(SPARSE_CTX, []),
    )


OUTDATED_INDEX = (
    "the recall index at {where} was made before exchanges carried context vectors (it has no "
    f"{DENSE_CTX!r}/{SPARSE_CTX!r}); with the stack stopped, run `memstream rebuild index` to rebuild it from "
    "Postgres (memories stored before then are indexed without context)"
)


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
    # The payloads of those of `ids` the index holds for this tenant and user.
    async def payloads(self, tenant_id: str, user_id: str, ids: Sequence[str]) -> dict[str, dict[str, Any]]: ...
    # Every leg's top `limit`, tenant-, user- and status-filtered in the engine, in one call: ids and
    # scores only (recall reads what it shows from Postgres, services.api.recall).
    async def legs(self, scope: Scope, dense: list[float], sparse: Sparse, limit: int) -> Legs: ...
    # The stored dense context vectors of those of `ids` that have one (a change without one keeps it).
    async def context_vectors(self, ids: Sequence[str]) -> dict[str, list[float]]: ...
    async def count(self) -> int: ...
    async def ping(self) -> bool: ...
    async def close(self) -> None: ...


def payloads_in_scope(
    points: Iterable[tuple[str, Mapping[str, Any] | None]], tenant_id: str, user_id: str
) -> dict[str, dict[str, Any]]:
    """Point id → payload, for the points of this tenant and user only (ids are global)."""
    return {
        pid: dict(payload)
        for pid, payload in points
        if payload is not None and payload.get("tenant_id") == tenant_id and payload.get("user_id") == user_id
    }


class PayloadVersions:
    """`VectorIndex.versions` as both engines answer it: each point's payload carries its record's version."""

    async def payloads(self, tenant_id: str, user_id: str, ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        raise NotImplementedError

    async def versions(self, tenant_id: str, user_id: str, ids: Sequence[str]) -> dict[str, int]:
        payloads = await self.payloads(tenant_id, user_id, ids)
        return {pid: int(payload.get("version", 0)) for pid, payload in payloads.items()}


@dataclass(frozen=True)
class Bm25Params:
    """BM25's document-side constants (settings recall_bm25_*; the defaults are the tuned ones).

    `avg_len`: the average length, in tokens after stopwords, of a memory's own
    text; a context document (CONTEXT_TURNS turns and the text) is taken to be
    `context_factor` times as long.
    """

    k1: float = 1.2
    b: float = 0.4
    avg_len: float = 15.0
    context_factor: float = 3.0


class Bm25Encoder:
    """Sparse BM25 term weights from the Qdrant engine's tokenizer and stemmer (IDF: the index's)."""

    def __init__(self, params: Bm25Params | None = None) -> None:
        import qdrant_edge

        p = params or Bm25Params()
        self.params = p

        def model(avg_len: float) -> Any:
            config = qdrant_edge.Bm25Config(language="english", k=p.k1, b=p.b, avg_len=avg_len)
            return qdrant_edge.Bm25(config)

        self._own = model(p.avg_len)
        self._context = model(p.avg_len * p.context_factor)

    @classmethod
    def from_settings(cls, settings: Settings) -> Bm25Encoder:
        return cls(
            Bm25Params(
                k1=settings.recall_bm25_k1,
                b=settings.recall_bm25_b,
                avg_len=settings.recall_bm25_avg_len,
                context_factor=settings.recall_bm25_context_factor,
            )
        )

    def document(self, text: str) -> Sparse:
        return _sparse(self._own.embed_document(text))

    def context_document(self, context: Sequence[str], text: str) -> Sparse | None:
        """The BM25 context vector of an exchange; None without context (the point is not in that leg)."""
        return _sparse(self._context.embed_document(sparse_context_text(context, text))) if context else None

    def query(self, text: str) -> Sparse:
        """Query terms weigh 1 each (IDF comes from the index); the same for the own and the context leg."""
        return _sparse(self._own.embed_query(text))


def _sparse(vec: Any) -> Sparse:
    return Sparse(list(vec.indices), list(vec.values))
