"""Score fusion of the recall legs: min-max normalised scores, weighted and summed.

Reciprocal-rank fusion keeps only ranks, so its scores are nearly flat (rank
1 and rank 10 differ by 13 %): any other ranking signal, such as a memory
recalled a hundred times, then outweighs an exact match. Normalised scores
keep the margin: a memory that is by far the best match on both legs stays
far ahead. Each leg is normalised over its own top list (best = 1, worst of
the list = 0); a memory missing from a leg gets 0 there.

Recall has four legs and a session cue (services.stores.vector):

    own     = wd·n(dense)     + ws·n(bm25)         the memory's own text
    context = wd·n(dense_ctx) + ws·n(bm25_ctx)     an exchange with the turns before it
    base    = own + w_ctx·context
    total   = base + w_session·session

The context legs find the turn that answers a question whose words were in
the turn before it ("did you go?" – "yes, last May"); the memory returned is
still the turn alone. A memory that has no context legs (an episode, a fact,
an exchange that opened its session) is scored on its own text for both, so
types without context are not pushed down by the legs they cannot be in.
`session` is how well the hit's conversation matches: the best base score
of any hit of the same session, over the best session's (1 for the best
session): a turn of the conversation the question is about gains over an
equally close turn of another. With w_ctx = w_session = 0 this is the
two-leg fusion of the own text alone.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from services.stores.vector import Hit, Legs


@dataclass(frozen=True)
class FusionWeights:
    """Shares of the dense and the BM25 leg, for the own and the context pair alike."""

    dense: float = 0.4
    sparse: float = 0.6


@dataclass(frozen=True)
class RecallFusion:
    """Every weight of the recall fusion (settings recall_*; the defaults are the tuned ones)."""

    legs: FusionWeights = field(default_factory=FusionWeights)
    context: float = 1.0
    session: float = 0.4


OWN_ONLY = RecallFusion(context=0.0, session=0.0)


def normalised(hits: Sequence[Hit]) -> dict[str, float]:
    """Each hit's score scaled to [0, 1] over the list; a list of equal scores is all 1."""
    if not hits:
        return {}
    scores = [h.score for h in hits]
    low, high = min(scores), max(scores)
    span = high - low
    return {h.id: 1.0 if span <= 0 else (h.score - low) / span for h in hits}


def weighted(dense: Sequence[Hit], sparse: Sequence[Hit], weights: FusionWeights) -> dict[str, float]:
    """One pair of legs fused: every id of either leg, wd·n(dense) + ws·n(sparse)."""
    nd, ns = normalised(dense), normalised(sparse)
    return {i: weights.dense * nd.get(i, 0.0) + weights.sparse * ns.get(i, 0.0) for i in {*nd, *ns}}


def _ordered(scores: Mapping[str, float], payloads: Mapping[str, Mapping[str, Any]], limit: int) -> list[Hit]:
    """Best score first, ties by id (a stable order), the first `limit`."""
    fused = [Hit(i, s, payloads[i]) for i, s in scores.items()]
    fused.sort(key=lambda h: (-h.score, h.id))
    return fused[:limit]


class Traits(Protocol):
    """What fusion needs to know of a memory besides its scores: a Postgres hit (recall) or an index payload."""

    @property
    def has_context(self) -> bool: ...  # in the context legs at all (an exchange with turns before it)

    @property
    def session_id(self) -> str | None: ...


def session_in(source: object) -> str | None:
    """The session of a provenance as JSON (a payload's `source`, a row's `provenance`), if it names one."""
    session = source.get("session_id") if isinstance(source, Mapping) else None
    return session if isinstance(session, str) else None


def fused_scores(legs: Legs, f: RecallFusion, traits: Mapping[str, Traits]) -> dict[str, float]:
    """The total of every id any leg returned (see the module doc); every id must have traits."""
    own = weighted(legs.dense, legs.sparse, f.legs)
    ctx = weighted(legs.dense_ctx, legs.sparse_ctx, f.legs)
    totals: dict[str, float] = {}
    for i in {*own, *ctx}:
        mine = own.get(i, 0.0)
        totals[i] = mine + f.context * ctx.get(i, 0.0 if traits[i].has_context else mine)
    if f.session:
        best: dict[str, float] = {}
        for i, score in totals.items():
            if (sid := traits[i].session_id) is not None:
                best[sid] = max(best.get(sid, 0.0), score)
        top = max(best.values(), default=0.0)
        if top > 0:
            for i in totals:
                if (sid := traits[i].session_id) is not None:
                    totals[i] += f.session * best[sid] / top
    return totals


def fuse_legs(legs: Legs, f: RecallFusion, traits: Mapping[str, Traits], limit: int) -> list[Hit]:
    """The four legs and the session cue as one list, best total first (ties by id); hits keep their payloads."""
    payloads = {h.id: h.payload for leg in legs.all()[::-1] for h in leg}
    return _ordered(fused_scores(legs, f, traits), payloads, limit)
