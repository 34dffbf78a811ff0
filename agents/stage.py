"""Shared agent plumbing: timing, counting, forwarding, parsing and delivery with DLQ fallback."""

from __future__ import annotations

import functools
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

from pydantic import BaseModel

from agents.dlq import DeadLetters
from agents.outage import outlasting
from schemas import codec
from services.archive.keys import KeyStore
from services.core import backlog, metrics, tracing
from services.core.config import Settings
from services.core.errors import InvalidEvent
from services.kafka import dead_letters
from services.kafka.producer import acknowledged

M = TypeVar("M", bound=BaseModel)
T = TypeVar("T")

# Reasons a stage itself can give, beyond parsing (declared as zero series).
HANDLING_REASONS = ("processing_error", "store_rejected")


@contextmanager
def span(stage: str, count: int) -> Iterator[None]:
    metrics.EVENTS_IN.labels(stage=stage).inc(count)
    metrics.BATCH_SIZE.labels(stage=stage).observe(count)
    started = time.perf_counter()
    try:
        yield
    finally:
        metrics.STAGE_LATENCY.labels(stage=stage).observe(time.perf_counter() - started)


async def forward(topic: Any, stage: str, models: Sequence[Any], headers: Sequence[tuple[str, bytes]] = ()) -> None:
    """Send keyed models; the producer batches, we await delivery once at the end."""
    await send_all(topic, stage, [(m.key, codec.dumps(m)) for m in models], headers)


async def send_all(
    topic: Any, stage: str, messages: Sequence[tuple[bytes, bytes]], headers: Sequence[tuple[str, bytes]] = ()
) -> None:
    """Send (key, value) pairs, each with `headers`, and wait until the broker has every one.

    A failure raises once all have settled.
    """
    sent = [*headers, *tracing.header_kwargs().get("headers", ())]  # and the batch span's context, when tracing is on
    extra = {"headers": sent} if sent else {}
    await acknowledged([await topic.send(key=key, value=value, **extra) for key, value in messages])
    if messages:
        metrics.EVENTS_OUT.labels(stage=stage, topic=topic.get_topic_name()).inc(len(messages))


async def parse_or_dlq(events: Sequence[Any], model: type[M], dlq: DeadLetters, stage: str) -> list[tuple[Any, M]]:
    """Valid events with their models; the rest go to the DLQ as schema violations."""
    return await dead_letters.parse_or_dead_letter(events, model, _sending(dlq, stage))


def _sending(dlq: DeadLetters, stage: str) -> dead_letters.DeadLetter[Any]:
    """`dlq.send` for the stage, as the shared policy (services/kafka/dead_letters.py) calls it."""

    async def dead_letter(event: Any, reason: str, error: str) -> None:
        await dlq.send(event, stage=stage, reason=reason, error=error)

    return dead_letter


async def deliver(
    items: Sequence[tuple[Any, T]],
    handle: Callable[[list[T]], Awaitable[None]],
    dlq: DeadLetters,
    stage: str,
    first_delay: float = 0.5,
    max_delay: float = 30.0,
) -> None:
    """Hand (event, value) pairs to `handle` so that nothing is lost and the stage never stops.

    The policy of services/kafka/dead_letters.py: an outage (agents/outage.py:
    a store unavailable, or Kafka not taking what the handler produces) is
    waited out, the same batch retried uncommitted with capped backoff; any
    other exception sends each item that still fails on its own to memory.dlq
    with its reason.
    """

    async def outlast(attempt: Callable[[], Awaitable[None]], failed: int) -> None:
        await outlasting(
            attempt, stage=stage, what="store or broker", first_delay=first_delay, max_delay=max_delay, failed=failed
        )

    await dead_letters.deliver(items, handle, stage=stage, outlast=outlast, dead_letter=_sending(dlq, stage))


async def take_batches(stream: Any, size: int, within: float) -> AsyncIterator[list[Any]]:
    """`stream.take_events(size, within)`, each batch acknowledged only once the caller has finished with it.

    Faust's take_events acknowledges a batch in a `finally`, so a body that
    raises, or a task cancelled while a batch waits out an outage (a
    SIGTERM), would have that batch's offsets committed with its work
    undone. A message is acknowledged when its reference count (one per
    stream reading it, counted by Faust's conductor) drops to zero: holding
    one more reference while the caller works leaves that `finally` one
    short. The hold is dropped only when the caller asks for the next batch,
    i.e. once every effect of this one is durable (deliver returns only then).
    """
    async for events in stream.take_events(size, within=within):
        for event in events:
            event.message.incref()
        yield events
        for event in events:
            event.message.decref()


async def consume_batches(
    stream: Any,
    size: int,
    within: float,
    process: Callable[[list[Any]], Awaitable[None]],
    *,
    stage: str,
    max_delay: float,
) -> None:
    """Batches of `stream` to `process`, one at a time, each acknowledged once `process` returned.

    An exception escaping `process` is neither an outage (waited out inside)
    nor bad data (dead-lettered inside): a bug. The batch is processed again
    after a backoff, for as long as it fails, and stays unacknowledged
    meanwhile; taking the next batch instead could commit the partition's
    offset past this one. A worker stopped meanwhile leaves it to the next.
    """
    async for events in take_batches(stream, size, within):
        stamps = (e.message.timestamp for e in events if backlog.counts_as_ingest(e.message.headers))
        backlog.STAGES.saw(stage, backlog.oldest_wait(stamps, time.time()))
        await outlasting(
            functools.partial(process, events),
            stage=stage,
            what=f"a batch of {len(events)}",
            max_delay=max_delay,
            failed=len(events),
            retry=lambda _: True,
        )


async def consume_parsed(
    stream: Any,
    read: Callable[[bytes | None], T],
    handle: Callable[[list[T]], Awaitable[None]],
    dlq: DeadLetters,
    stage: str,
    *,
    size: int,
    within: float,
    max_delay: float,
) -> None:
    """Batches of a stream read by `read`: what does not read is dead-lettered, the rest delivered to `handle`.

    A batch's offsets are committed once its dead letters and its handling are durable (`consume_batches`).
    """

    async def process(events: list[Any]) -> None:
        with span(stage, len(events)), tracing.batch_span(stage, events):
            batch = []
            for event in events:
                try:
                    batch.append((event, read(event.value)))
                except InvalidEvent as exc:
                    await dlq.send(event, stage=stage, reason=exc.reason, error=exc.message)
            if batch:
                await deliver(batch, handle, dlq, stage, max_delay=max_delay)

    await consume_batches(stream, size, within, process, stage=stage, max_delay=max_delay)


def batched_agent(
    app: Any,
    source: Any,
    dlq_topic: Any,
    settings: Settings,
    *,
    keys: KeyStore | None,
    stage: str,
    model: type[M],
    size: int,
    within: float,
    handle: Callable[[list[M]], Awaitable[None]],
) -> None:
    """Register an agent that parses batches of `model` and hands valid ones to `handle`.

    `keys` seals its dead letters of identifiable users (agents/dlq.py).
    """
    metrics.DLQ.labels(stage=stage, reason="schema_violation")
    max_delay = settings.retry_max_backoff
    dlq = DeadLetters(dlq_topic, settings.max_message_bytes, keys, max_delay=max_delay)

    async def process(events: list[Any]) -> None:
        with span(stage, len(events)), tracing.batch_span(stage, events):
            batch = await parse_or_dlq(events, model, dlq, stage)
            if batch:
                await deliver(batch, handle, dlq, stage, max_delay=max_delay)

    async def run(stream: Any) -> None:
        await consume_batches(stream, size, within, process, stage=stage, max_delay=max_delay)

    app.agent(source, name=stage)(run)
