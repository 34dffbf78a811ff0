"""Looking into the recall index from a test: hits with their payloads, fused as recall fuses them.

Recall itself reads only ids and scores from the index and what it shows
from Postgres (services/api/recall.py); a test that wants to see what the
index holds for a query takes the legs and the payloads, the two reads every
index engine answers, and fuses them here with the payloads' traits.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from services.stores.fusion import RecallFusion, fuse_legs, session_in
from services.stores.vector import Hit, Legs, Scope, Sparse, VectorIndex


@dataclass(frozen=True, slots=True)
class PayloadTraits:
    """A hit's traits as fusion needs them, read from its index payload (services.stores.vector.IndexPayload)."""

    has_context: bool
    session_id: str | None

    @classmethod
    def of(cls, payload: Mapping[str, Any]) -> PayloadTraits:
        return cls(bool(payload.get("has_context", False)), session_in(payload.get("source")))


def payload_traits(legs: Legs) -> dict[str, PayloadTraits]:
    """The traits of every hit of legs that carry payloads (`with_payloads`)."""
    return {h.id: PayloadTraits.of(h.payload) for leg in legs.all() for h in leg}


def with_payloads(legs: Legs, payloads: Mapping[str, Mapping[str, Any]]) -> Legs:
    """The hits that have a payload in `payloads`, carrying it."""
    return Legs(*([Hit(h.id, h.score, payloads[h.id]) for h in leg if h.id in payloads] for leg in legs.all()))


async def search(index: VectorIndex, scope: Scope, dense: list[float], sparse: Sparse, limit: int) -> list[Hit]:
    """The best `limit` hits of the four legs with their payloads, fused with the default weights."""
    legs = await index.legs(scope, dense, sparse, limit)
    legs = with_payloads(legs, await index.payloads(scope.tenant_id, scope.user_id, legs.ids()))
    return fuse_legs(legs, RecallFusion(), payload_traits(legs), limit)
