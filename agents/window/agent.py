"""window: archive every turn, keep the session's working window, evict the rest."""

from __future__ import annotations

import logging
from typing import Any

import faust

from agents.dlq import send_to_dlq
from agents.ingest import REASONS, parse_chat_event
from agents.stage import deliver, forward, span
from agents.topics import Topics
from agents.window.logic import WindowLimits, append_turn, window_tokens
from schemas import EvictedChunk, SessionEvent, TurnEvent
from services import metrics
from services.errors import InvalidEvent
from services.runtime import Runtime

STAGE = "window"
log = logging.getLogger(__name__)


async def handle_turn(rt: Runtime, turn: TurnEvent, limits: WindowLimits) -> EvictedChunk | None:
    async with rt.pg.transaction("window_append") as conn:
        await rt.pg.archive_turn(conn, turn)
        window, _closed = await rt.pg.load_window(conn, turn.tenant_id, turn.user_id, turn.session_id)
        update = append_turn(window, turn, limits)
        if update.duplicate:
            return None
        await rt.pg.save_window(
            conn, turn.tenant_id, turn.user_id, turn.session_id, update.window, window_tokens(update.window)
        )
    if not update.evicted:
        return None
    return EvictedChunk(
        tenant_id=turn.tenant_id,
        user_id=turn.user_id,
        session_id=turn.session_id,
        reason="trimmed",
        turns=update.evicted,
        cause=[turn.event_id],
    )


async def handle_session_end(rt: Runtime, event: SessionEvent) -> EvictedChunk | None:
    """The rest of the window goes to the summarizer; the window empties."""
    async with rt.pg.transaction("window_close") as conn:
        window, closed = await rt.pg.load_window(conn, event.tenant_id, event.user_id, event.session_id)
        if closed:
            return None
        await rt.pg.save_window(conn, event.tenant_id, event.user_id, event.session_id, [], 0, closed_at=event.ts)
    if not window:
        return None
    return EvictedChunk(
        tenant_id=event.tenant_id,
        user_id=event.user_id,
        session_id=event.session_id,
        reason="session_end",
        turns=window,
        cause=[event.event_id],
    )


def register(app: faust.App, topics: Topics, rt: Runtime) -> None:
    s = rt.settings
    limits = WindowLimits(s.window_max_tokens, s.window_max_turns, s.window_keep_last)
    for reason in REASONS:  # zero series from the start, so increase() counts the first one
        metrics.DLQ.labels(stage=STAGE, reason=reason)

    async def apply(events: list[TurnEvent | SessionEvent]) -> None:
        for parsed in events:
            if isinstance(parsed, TurnEvent):
                chunk = await handle_turn(rt, parsed, limits)
            else:
                chunk = await handle_session_end(rt, parsed)
            if chunk is not None:
                await forward(topics.evicted, STAGE, [chunk])

    async def window(stream: Any) -> None:
        async for event in stream.events():
            with span(STAGE, 1):
                try:
                    parsed = parse_chat_event(event.value, max_content_bytes=s.max_content_bytes, tenants=s.tenants)
                except InvalidEvent as exc:
                    await send_to_dlq(topics.dlq, event, stage=STAGE, reason=exc.reason, error=exc.message)
                    continue
                await deliver([(event, parsed)], apply, topics.dlq, STAGE)

    app.agent(topics.turns, name="window")(window)
