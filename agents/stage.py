"""Shared agent plumbing: timing, counting, forwarding, parsing with DLQ fallback."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from agents.dlq import send_to_dlq
from schemas import codec
from services import metrics

M = TypeVar("M", bound=BaseModel)


@contextmanager
def span(stage: str, count: int) -> Iterator[None]:
    metrics.EVENTS_IN.labels(stage=stage).inc(count)
    metrics.BATCH_SIZE.labels(stage=stage).observe(count)
    started = time.perf_counter()
    try:
        yield
    except Exception:
        metrics.STAGE_ERRORS.labels(stage=stage).inc(count)
        raise
    finally:
        metrics.STAGE_LATENCY.labels(stage=stage).observe(time.perf_counter() - started)


async def forward(topic: Any, stage: str, models: Sequence[Any]) -> None:
    """Send keyed models; the producer batches, we await delivery once at the end."""
    pending = [await topic.send(key=m.key, value=codec.dumps(m)) for m in models]
    for fut in pending:
        await fut
    if models:
        metrics.EVENTS_OUT.labels(stage=stage, topic=topic.get_topic_name()).inc(len(models))


async def parse_or_dlq(events: Sequence[Any], model: type[M], dlq: Any, stage: str) -> list[M]:
    """Valid events as models; the rest go to the DLQ as schema violations."""
    parsed: list[M] = []
    for event in events:
        try:
            parsed.append(codec.loads(model, event.value))
        except (ValueError, ValidationError) as exc:
            await send_to_dlq(dlq, event, stage=stage, reason="schema_violation", error=str(exc))
    return parsed


def batched_agent(
    app: Any,
    source: Any,
    dlq: Any,
    *,
    stage: str,
    model: type[M],
    size: int,
    within: float,
    handle: Callable[[list[M]], Awaitable[None]],
) -> None:
    """Register an agent that parses batches of `model` and hands valid ones to `handle`."""
    metrics.DLQ.labels(stage=stage, reason="schema_violation")

    async def run(stream: Any) -> None:
        async for events in stream.take_events(size, within=within):
            with span(stage, len(events)):
                batch = await parse_or_dlq(events, model, dlq, stage)
                if batch:
                    await handle(batch)

    app.agent(source, name=stage)(run)
