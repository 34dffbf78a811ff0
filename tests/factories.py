"""Typed test events (turn `i` of one session, users on even turns, assistants on odd) and a keyed fact candidate."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from schemas import MemoryCandidate, MemoryType, Provenance, Role, TurnEvent

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def turn_event(
    i: int, content: str, step: timedelta = timedelta(seconds=1), start: datetime = T0, **metadata: Any
) -> TurnEvent:
    return TurnEvent(
        event_id=f"e{i}",
        tenant_id="t",
        user_id="u",
        session_id="s",
        turn_index=i,
        role=Role.USER if i % 2 == 0 else Role.ASSISTANT,
        content=content,
        ts=start + i * step,
        metadata=metadata,
    )


def city_fact(
    candidate_id: str, city: str, observed_at: datetime, events: list[str], user: str = "u"
) -> MemoryCandidate:
    """ "User lives in CITY": the keyed fact (location/city) the supersession tests state and restate."""
    return MemoryCandidate(
        candidate_id=candidate_id,
        tenant_id="t",
        user_id=user,
        type=MemoryType.FACT,
        text=f"User lives in {city}",
        category="location",
        key_name="city",
        value=city,
        importance=0.8,
        confidence=0.9,
        observed_at=observed_at,
        source=Provenance(session_id="s", event_ids=events),
        extractor="test",
    )
