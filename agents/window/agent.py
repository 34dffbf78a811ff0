"""window: archive every turn, extract rule candidates, keep the session's window, evict the rest.

Batches of turns share one transaction and one wait for the broker: per-turn
commits and sends were most of this stage's cost.

Rule extraction runs here, inline, inside the same transaction as the archive
write: only a turn the archive accepts (not a redelivery, not a different
message reusing a known event id) yields candidates, and candidates, evicted
chunks and the window state commit together through the outbox.

Every accepted turn and session end is also sealed with its user's data key
for memory.archive (services/archive), through the same outbox: a crash
neither loses an archive record nor seals an event twice.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import faust

from agents.corpus import corpus_counts
from agents.dlq import DeadLetters
from agents.outbox import publish
from agents.stage import HANDLING_REASONS, consume_parsed
from agents.topics import Topics
from agents.window.archived import UNREADABLE, count_forgotten, open_archived, parse_archived
from agents.window.logic import WindowLimits, append_turn, preceding, window_tokens
from agents.window.outgoing import archive_messages, candidate_messages, evicted_messages, scope_of
from schemas import SessionEvent, TurnEvent
from services.archive import KeyStore
from services.archive.codec import ArchiveRecord
from services.core import metrics
from services.core.config import Settings
from services.core.errors import InvalidEvent
from services.core.faults import crash_point
from services.core.ingest import REASONS, parse_chat_event
from services.runtime import Runtime
from services.stores.postgres import Archived, Conn, OutboxMessage

STAGE = "window"
log = logging.getLogger(__name__)
CONFLICT_REASON = "conflicting_duplicate"
T = TypeVar("T")


async def handle_events(
    rt: Runtime, events: list[TurnEvent | SessionEvent], limits: WindowLimits, keys: KeyStore | None = None
) -> list[OutboxMessage]:
    """One transaction for a batch: turns and session ends in order, their messages in the outbox.

    If any event in the batch fails, the whole transaction rolls back and
    `deliver` retries the events one at a time. With `keys`, the accepted
    events are archived too (one key lookup for the batch); a rebuild that
    replays memory.archive passes none, so it does not archive them again.
    """
    messages: list[OutboxMessage] = []
    accepted: list[TurnEvent | SessionEvent] = []
    async with rt.pg.transaction("window_batch") as conn:
        for event in events:
            if isinstance(event, TurnEvent):
                sent, new = await handle_turn(rt, conn, event, limits)
            else:
                sent, new = await handle_session_end(rt, conn, event)
            messages += sent
            if new:
                accepted.append(event)
        await count_corpus(rt, conn, accepted)
        if keys is not None and accepted:
            archived = archive_messages(
                accepted, await keys.for_writing(conn, {(e.tenant_id, e.user_id) for e in accepted})
            )
            await rt.outbox.add(conn, archived)
            messages += archived
    return messages


async def count_corpus(rt: Runtime, conn: Conn, accepted: list[TurnEvent | SessionEvent]) -> None:
    """The corpus counts summaries weigh words against (agents/corpus.py), for turns accepted once."""
    by_tenant: dict[str, list[TurnEvent]] = {}
    for event in accepted:
        if isinstance(event, TurnEvent):
            by_tenant.setdefault(event.tenant_id, []).append(event)
    for tenant_id, turns in sorted(by_tenant.items()):
        counts = await asyncio.to_thread(corpus_counts, turns)  # every word hashed: off the loop
        await rt.corpus.add(conn, tenant_id, counts)


async def handle_turn(
    rt: Runtime, conn: Conn, turn: TurnEvent, limits: WindowLimits
) -> tuple[list[OutboxMessage], bool]:
    """The messages to send for this turn (its own, or those a crash left unsent) and whether it was new."""
    archived = await rt.windows.archive_turn(conn, turn)
    if archived is Archived.CONFLICT:
        raise InvalidEvent(CONFLICT_REASON, f"event_id {turn.event_id!r} is known with different content")
    if archived is Archived.DUPLICATE:
        return await rt.outbox.pending(conn, scope_of(turn.tenant_id, turn.user_id)), False
    state = await rt.windows.load_window(conn, turn.tenant_id, turn.user_id, turn.session_id)
    update = append_turn(state.turns, turn, limits.for_session(turn.tenant_id, turn.user_id, turn.session_id))
    # A new turn after session_end reopens the session with a fresh window.
    await rt.windows.save_window(
        conn, turn.tenant_id, turn.user_id, turn.session_id, update.window, window_tokens(update.window)
    )
    # Rule extraction is CPU work (up to a few hundred ms on a turn at the content limit): a worker thread
    # keeps the event loop, which the read service may share, answering meanwhile.
    messages = await asyncio.to_thread(candidate_messages, turn, preceding(state.turns, turn))
    messages += evicted_messages(turn, update.evicted, reason="trimmed", max_bytes=rt.settings.max_message_bytes)
    await rt.outbox.add(conn, messages)
    return messages, True


async def handle_session_end(rt: Runtime, conn: Conn, event: SessionEvent) -> tuple[list[OutboxMessage], bool]:
    """The rest of the window goes to the summarizer; the window empties. Once (the flag: this time)."""
    state = await rt.windows.load_window(conn, event.tenant_id, event.user_id, event.session_id)
    if state.closed or state.end_event_id == event.event_id:
        return await rt.outbox.pending(conn, scope_of(event.tenant_id, event.user_id)), False
    await rt.windows.save_window(
        conn, event.tenant_id, event.user_id, event.session_id, [], 0, closed_at=event.ts, end_event_id=event.event_id
    )
    messages = evicted_messages(event, state.turns, reason="session_end", max_bytes=rt.settings.max_message_bytes)
    await rt.outbox.add(conn, messages)
    return messages, True


def register(app: faust.App, topics: Topics, rt: Runtime) -> None:
    s = rt.settings
    limits = window_limits(s)
    dlq = DeadLetters(topics.dlq, s.max_message_bytes, rt.keys)
    by_name = topics.by_name()
    for reason in (
        *REASONS,
        CONFLICT_REASON,
        *HANDLING_REASONS,
        UNREADABLE,
    ):  # zero series: increase() counts the first
        metrics.DLQ.labels(stage=STAGE, reason=reason)
    metrics.ARCHIVE_SKIPPED.labels(reason="forgotten")
    for reason in ("budget", "hits"):
        metrics.RULES_STOPPED.labels(reason=reason)
    # The default's window archives what it accepts; a generation's reads the archive
    # (agents/window/archived.py) and must not archive its input again.
    keys = rt.open_keys()

    async def apply(events: list[TurnEvent | SessionEvent]) -> None:
        messages = await handle_events(rt, events, limits, None if s.generation else keys)
        crash_point(s, "window.after_commit")
        await publish(rt.outbox, by_name, STAGE, messages, on_sent=lambda: crash_point(s, "window.after_publish"))

    async def apply_archived(records: list[ArchiveRecord]) -> None:
        events, forgotten = await open_archived(keys, records)
        await apply(events)
        count_forgotten(forgotten)

    def parse(raw: bytes | None) -> TurnEvent | SessionEvent:
        return parse_chat_event(raw, max_content_bytes=s.max_content_bytes, tenants=s.tenants)

    async def consume(
        stream: Any, read: Callable[[bytes | None], T], handle: Callable[[list[T]], Awaitable[None]]
    ) -> None:
        await consume_parsed(
            stream,
            read,
            handle,
            dlq,
            STAGE,
            size=s.window_batch_size,
            within=s.window_batch_within,
            max_delay=s.retry_max_backoff,
        )

    async def window(stream: Any) -> None:
        if s.generation:
            await consume(stream, parse_archived, apply_archived)
        else:
            await consume(stream, parse, apply)

    app.agent(window_input(topics, s), name="window")(window)


def window_limits(settings: Settings) -> WindowLimits:
    return WindowLimits(
        settings.window_max_tokens,
        settings.window_max_turns,
        settings.window_keep_last,
        settings.window_trim_to,
        settings.window_trim_jitter,
    )


def window_input(topics: Topics, settings: Settings) -> Any:
    """`chat.turns` for the default generation, `memory.archive` for any other (see agents/window/archived.py)."""
    return topics.archive if settings.generation else topics.turns
