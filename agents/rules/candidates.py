"""From one user turn to memory candidates, with ids that replay to the same value."""

from __future__ import annotations

from agents.rules.extract import Extraction, entities, extract
from schemas import MemoryCandidate, MemoryType, Provenance, Role, TurnEvent
from services.textutil import normalize, stable_id

EXTRACTOR = "rules/v1"
EXCHANGE_IMPORTANCE = 0.3


def _candidate_id(turn: TurnEvent, found: Extraction) -> str:
    base = (turn.tenant_id, turn.user_id, found.type.value)
    if found.type is MemoryType.FACT:
        return stable_id(*base, found.category or "", found.key_name or "", normalize(found.value or ""))
    return stable_id(*base, normalize(found.text))


def _provenance(turn: TurnEvent) -> Provenance:
    return Provenance(session_id=turn.session_id, event_ids=[turn.event_id], metadata=[turn.metadata])


def candidates_for_turn(turn: TurnEvent) -> list[MemoryCandidate]:
    """Rule hits plus the raw turn as an exchange memory; user turns only."""
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
            **common,
        )
    )
    return out
