"""Typed test events (turn `i` of one session, users on even turns, assistants on odd), exchange and keyed
fact candidates, and a stored memory."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from schemas import MemoryCandidate, MemoryRecord, MemoryStatus, MemoryType, Provenance, Role, TurnEvent
from services.core.textutil import content_hash, stable_id

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


def exchange_candidate(text: str, user: str = "u", at: datetime = T0) -> MemoryCandidate:
    """What the window stage proposes for a user's turn: its text, as an exchange (the id derives from the text)."""
    return MemoryCandidate(
        candidate_id=stable_id(text),
        tenant_id="t",
        user_id=user,
        type=MemoryType.EXCHANGE,
        text=text,
        importance=0.3,
        confidence=1.0,
        observed_at=at,
        source=Provenance(session_id="s", event_ids=[f"ev-{text[:5]}"]),
        extractor="test",
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


def memory_record(
    text: str,
    *,
    tenant: str = "t",
    user: str = "u",
    type_: MemoryType = MemoryType.PREFERENCE,
    status: MemoryStatus = MemoryStatus.ACTIVE,
    at: datetime = T0,
    session: str = "s",
    events: tuple[str, ...] = ("e",),
) -> MemoryRecord:
    """A memory as the store holds one: id from (tenant, user, text), the text's real hash, written when observed."""
    return MemoryRecord(
        id=stable_id(tenant, user, text),
        tenant_id=tenant,
        user_id=user,
        type=type_,
        text=text,
        content_hash=content_hash(text),
        importance=0.5,
        confidence=1.0,
        status=status,
        observed_at=at,
        created_at=at,
        updated_at=at,
        source=Provenance(session_id=session, event_ids=list(events)),
    )
