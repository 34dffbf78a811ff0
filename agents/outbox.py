"""Publishing the outbox: the one way a committed row reaches Kafka.

Every writer of outbox rows publishes through `publish`: the window and
maintenance stages, the commands stage, the relay for rows left behind, and
`memstream maintain` over its own producer. What differs between them is
data: where the rows are deleted from, the topic handles a row's topic name
routes to, the stage its metrics count for, and an optional hook between the
broker's acknowledgement and the delete (a crash point in the tests).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import faust

from agents.housekeeping import survive
from services.core import metrics, tracing
from services.kafka.producer import acknowledged
from services.runtime import Runtime
from services.stores.postgres import Outbox, OutboxMessage

log = logging.getLogger(__name__)


async def publish(
    rows: Outbox,
    topics_by_name: Mapping[str, Any],
    stage: str,
    messages: Sequence[OutboxMessage],
    on_sent: Callable[[], None] | None = None,
) -> None:
    """Send in order, wait once for the broker to have them all, then forget them.

    `rows`: the outbox the rows are deleted from. `topics_by_name`: a
    handle per base topic name, as rows name their topic (a generation's
    handles for its own topics); a handle needs only `send(key=, value=)`
    returning an awaitable acknowledgement.

    A failure before the delete leaves the rows to be sent again: a duplicate
    downstream (idempotent there), never a loss. A send the broker does not
    acknowledge raises (an outage to the stage, agents/outage.py) once every
    send has settled. Rows repeated in `messages` (a batch can list a scope's
    leftovers twice) are sent once.
    """
    unique = list({m.id: m for m in messages}.values())
    if not unique:
        return
    traced = tracing.header_kwargs()  # the batch span's context, when tracing is on
    await acknowledged([await topics_by_name[m.topic].send(key=m.key, value=m.value, **traced) for m in unique])
    for topic_name, count in Counter(m.topic for m in unique).items():
        metrics.EVENTS_OUT.labels(stage=stage, topic=topic_name).inc(count)
    if on_sent is not None:
        on_sent()
    await rows.delete([m.id for m in unique])


def register_relay(app: faust.App, rt: Runtime, topics_by_name: Mapping[str, Any], interval: float) -> None:
    """Every `interval` seconds, send what no stage sent within that time."""

    async def relay_once() -> None:
        stale = await rt.outbox.stale(older_than_seconds=interval, limit=1000)
        await publish(rt.outbox, topics_by_name, "outbox", stale)
        if stale:
            log.info("outbox relay sent %d messages left behind", len(stale))

    @app.timer(interval=interval)  # type: ignore[untyped-decorator]
    async def outbox_relay() -> None:
        await survive("outbox relay", relay_once())
