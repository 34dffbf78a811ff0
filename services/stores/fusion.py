"""Score fusion of the recall legs: min-max normalised dense and BM25 scores, weighted and summed.

Reciprocal-rank fusion keeps only ranks, so its scores are nearly flat (rank
1 and rank 10 differ by 13 %): any other ranking signal, such as a memory
recalled a hundred times, then outweighs an exact match. Normalised scores
keep the margin: a memory that is by far the best match on both legs stays
far ahead. Each leg is normalised over its own top list (best = 1, worst of
the list = 0); a memory missing from a leg gets 0 there.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from services.stores.vector import Hit


@dataclass(frozen=True)
class FusionWeights:
    dense: float = 0.4
    sparse: float = 0.6


DEFAULT_FUSION = FusionWeights()


def normalised(hits: Sequence[Hit]) -> dict[str, float]:
    """Each hit's score scaled to [0, 1] over the list; a list of equal scores is all 1."""
    if not hits:
        return {}
    scores = [h.score for h in hits]
    low, high = min(scores), max(scores)
    span = high - low
    return {h.id: 1.0 if span <= 0 else (h.score - low) / span for h in hits}


def fuse(dense: Sequence[Hit], sparse: Sequence[Hit], weights: FusionWeights, limit: int) -> list[Hit]:
    """The legs' hits as one list, best fused score first (ties by id, so the order is stable)."""
    nd, ns = normalised(dense), normalised(sparse)
    payloads = {h.id: h.payload for h in (*sparse, *dense)}
    fused = [Hit(i, weights.dense * nd.get(i, 0.0) + weights.sparse * ns.get(i, 0.0), p) for i, p in payloads.items()]
    fused.sort(key=lambda h: (-h.score, h.id))
    return fused[:limit]
