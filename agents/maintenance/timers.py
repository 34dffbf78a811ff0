"""Leader-only timers: one worker of the group runs maintenance and closes idle sessions.

Faust's own `on_leader=True` needs its leader topic, which this app disables
(topics come from topics.yaml only), so it would never fire. The leader here
is the worker that owns partition 0 of `chat.turns`: the whole group consumes
that topic, so exactly one member owns it at a time, and it moves on with a
rebalance like any partition.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from functools import partial

import faust

from agents.dlq import DeadLetters
from agents.housekeeping import survive
from agents.maintenance.idle import close_idle_sessions
from agents.maintenance.rules.config import Rules
from agents.maintenance.run import run_pass
from agents.maintenance.synthesis import LLM_INVALID_OUTPUT, Synthesis, llm_synthesis
from agents.outbox import publish
from agents.stage import forward
from agents.topics import Topics
from schemas import SessionEvent
from services.core import metrics
from services.core import topics as topic_names
from services.core.config import Settings
from services.runtime import Runtime

log = logging.getLogger(__name__)
STAGE = "maintenance"


def leader_topic(settings: Settings) -> str:
    """The window's input, whose partition 0 makes its owner the leader: the archive in a generation."""
    return topic_names.ARCHIVE if settings.generation else topic_names.TURNS


def is_leader(app: faust.App, topic: str = topic_names.TURNS) -> bool:
    return any(tp.topic == topic and tp.partition == 0 for tp in app.consumer.assignment())


def register(app: faust.App, settings: Settings, rt: Runtime, topics: Topics) -> None:
    rules = Rules.from_settings(settings)
    publish_changes = partial(publish, rt.outbox, topics.by_name(), STAGE)

    async def send_ends(events: Sequence[SessionEvent]) -> None:
        await forward(topics.turns, "idle_sessions", events)

    synthesis: Synthesis | None = None
    if rt.llm is not None:
        dlq = DeadLetters(topics.dlq, settings.max_message_bytes, rt.keys)
        metrics.DLQ.labels(stage=STAGE, reason=LLM_INVALID_OUTPUT)

        async def dead_letter(key: bytes, value: bytes, error: str) -> None:
            await dlq.send_value(key, value, stage=STAGE, reason=LLM_INVALID_OUTPUT, error=error)

        synthesis = llm_synthesis(rt.llm, dead_letter)

    async def maintain_once() -> None:
        await run_pass(rt.pg, rt.outbox, rules, datetime.now(UTC), publish_changes, synthesis=synthesis, keys=rt.keys)

    async def close_once() -> None:
        closed = await close_idle_sessions(
            rt.pg, timedelta(seconds=settings.session_idle), datetime.now(UTC), send_ends
        )
        if closed:
            log.info("closed %d idle sessions", closed)

    leading = leader_topic(settings)

    @app.timer(interval=settings.maintenance_interval)  # type: ignore[untyped-decorator]
    async def maintenance_timer() -> None:
        if is_leader(app, leading):
            await survive("maintenance", maintain_once())

    if settings.generation:
        # The default closes idle sessions through chat.turns; the session_end is archived and reaches here.
        return

    @app.timer(interval=settings.session_idle_check_seconds)  # type: ignore[untyped-decorator]
    async def idle_sessions_timer() -> None:
        if is_leader(app):
            await survive("idle sessions", close_once())
