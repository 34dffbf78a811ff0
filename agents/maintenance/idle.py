"""Idle sessions close through the log: a `session_end` the timer produces, marked as such.

Going through `chat.turns` (not a direct write) keeps the window stage the
only writer of windows and makes the close part of the log, so a replay
closes the session again at the same point.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime, timedelta

from schemas import SessionEvent
from services.core.textutil import stable_id
from services.stores.postgres import PgPool
from services.stores.postgres.maintenance import IdleSession, idle_sessions

CLOSED_BY = {"closed_by": "idle_timer"}


def idle_session_end(session: IdleSession, now: datetime) -> SessionEvent:
    """Same session and last turn → same event id: a second tick before the close is applied changes nothing."""
    event_id = "idle-" + stable_id(
        "idle", session.tenant_id, session.user_id, session.session_id, session.last_turn_at.isoformat()
    )
    return SessionEvent(
        event_id=event_id,
        tenant_id=session.tenant_id,
        user_id=session.user_id,
        session_id=session.session_id,
        ts=now,
        metadata=dict(CLOSED_BY),
    )


async def close_idle_sessions(
    pool: PgPool, idle: timedelta, now: datetime, send: Callable[[Sequence[SessionEvent]], Awaitable[None]]
) -> int:
    events = [idle_session_end(s, now) for s in await idle_sessions(pool, now - idle)]
    if events:
        await send(events)
    return len(events)
