"""Typed test events: turn `i` of one session, users on even turns, assistants on odd."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from schemas import Role, TurnEvent

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
