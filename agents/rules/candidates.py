"""From one user turn to memory candidates, with ids that replay to the same value."""

from __future__ import annotations

from collections.abc import Sequence

from agents.rules.extract import Extraction, extract
from schemas import MemoryCandidate, MemoryType, Provenance, Role, TurnEvent
from services.core.terms import entities
from services.core.textutil import normalize, stable_id

EXTRACTOR = "rules/v1"
EXCHANGE_IMPORTANCE = 0.3
# Characters an exchange keeps of each context turn, the end of it (what led to this turn is said last).
# The dense model reads ~1,000 characters; this bounds what every change of the record carries.
CONTEXT_MAX_CHARS = 2_000


def _candidate_id(turn: TurnEvent, found: Extraction) -> str:
    base = (turn.tenant_id, turn.user_id, found.type.value)
    if found.type is MemoryType.FACT:
        return stable_id(*base, found.category or "", found.key_name or "", normalize(found.value or ""))
    return stable_id(*base, normalize(found.text))


def _provenance(turn: TurnEvent) -> Provenance:
    return Provenance(session_id=turn.session_id, event_ids=[turn.event_id], metadata=[turn.metadata])


def context_of(before: Sequence[TurnEvent]) -> list[str]:
    """An exchange's context: the texts of the turns before it (oldest first), each capped, blanks left out."""
    texts = (t.content.strip() for t in before)
    return [text[-CONTEXT_MAX_CHARS:] for text in texts if text]


def candidates_for_turn(turn: TurnEvent, before: Sequence[TurnEvent] = ()) -> list[MemoryCandidate]:
    """Rule hits plus the raw turn as an exchange memory; user turns only.

    `before`: the session's turns just before this one (agents.window.logic.preceding),
    the exchange's context; rule hits stand on their own words and get none.
    """
    if turn.role is not Role.USER or not turn.content.strip():
        return []
    source = _provenance(turn)
    names = entities(turn.content)
    common = {"tenant_id": turn.tenant_id, "user_id": turn.user_id, "observed_at": turn.ts, "source": source}
    out = [
        MemoryCandidate(
            candidate_id=_candidate_id(turn, found),
            type=found.type,
            text=found.text,
            category=found.category,
            key_name=found.key_name,
            value=found.value,
            importance=found.importance,
            confidence=found.confidence,
            entities=names,
            extractor=EXTRACTOR,
            **common,
        )
        for found in extract(turn.content)
    ]
    out.append(
        MemoryCandidate(
            candidate_id=stable_id(turn.tenant_id, turn.user_id, MemoryType.EXCHANGE.value, turn.event_id),
            type=MemoryType.EXCHANGE,
            text=turn.content.strip(),
            importance=EXCHANGE_IMPORTANCE,
            confidence=1.0,
            entities=names,
            extractor="exchange/v1",
            context=context_of(before),
            **common,
        )
    )
    return out
