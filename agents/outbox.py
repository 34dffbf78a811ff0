"""Publishing the outbox: after the commit, and again by a relay for anything left behind."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from itertools import groupby
from typing import Any

import faust

from agents.housekeeping import survive
from agents.stage import send_all
from services.runtime import Runtime
from services.stores.postgres import OutboxMessage

log = logging.getLogger(__name__)


async def publish(
    rt: Runtime,
    topics_by_name: dict[str, Any],
    stage: str,
    messages: Sequence[OutboxMessage],
    on_sent: Callable[[], None] | None = None,
) -> None:
    """Send in order, wait for the broker, then forget them.

    A failure before the delete leaves the rows to be sent again: a duplicate
    downstream (idempotent there), never a loss.
    """
    if not messages:
        return
    for topic_name, group in groupby(messages, key=lambda m: m.topic):
        await send_all(topics_by_name[topic_name], stage, [(m.key, m.value) for m in group])
    if on_sent is not None:
        on_sent()
    await rt.outbox.delete([m.id for m in messages])


def register_relay(app: faust.App, rt: Runtime, topics_by_name: dict[str, Any], interval: float) -> None:
    """Every `interval` seconds, send what no stage sent within that time."""

    async def relay_once() -> None:
        stale = await rt.outbox.stale(older_than_seconds=interval, limit=1000)
        await publish(rt, topics_by_name, "outbox", stale)
        if stale:
            log.info("outbox relay sent %d messages left behind", len(stale))

    @app.timer(interval=interval)  # type: ignore[untyped-decorator]
    async def outbox_relay() -> None:
        await survive("outbox relay", relay_once())
