"""Periodic gauges of the worker: consumer lag and memory counts.

Both are read on a timer, never per event: lag needs every assigned
partition, counts need a Postgres aggregate.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import faust

from services.core import metrics
from services.core.config import Settings
from services.core.errors import StoreError
from services.runtime import Runtime

log = logging.getLogger(__name__)


def partition_lag(end: int | None, committed: int | None) -> int | None:
    """Messages not yet committed; None while the log end is unknown.

    Both offsets are "next offset" positions, as Kafka reports them.
    """
    if end is None:
        return None
    return max(end - (committed or 0), 0)


async def refresh_lag(app: faust.App) -> None:
    """Lag from the high watermark of the latest fetch response, never from end_offsets (ListOffsets).

    tansu's ListOffsets "latest" stops short of the log end (the first offset
    of a recent batch plus one), so a gauge built on it under-counts, down to
    0 while a batch still waits. Its fetch responses carry the exact end
    (tests/integration/test_durable_broker.py holds both to account).
    """
    consumer = app.consumer
    committed = app.monitor.tp_committed_offsets
    for tp in consumer.assignment():
        done = committed.get(tp)
        if done is None:
            # Nothing committed by this process yet: its fetch position
            # started at the group's committed offset.
            done = await consumer.position(tp)
        lag = partition_lag(consumer.highwater(tp), done)
        if lag is not None:
            metrics.CONSUMER_LAG.labels(topic=tp.topic, partition=str(tp.partition)).set(lag)


async def refresh_memory_counts(runtime: Runtime) -> None:
    for type_, status, n in await runtime.reads.counts_by_type_status():
        metrics.MEMORIES.labels(type=type_, status=status).set(n)


async def survive(name: str, work: Awaitable[None]) -> None:
    """Run one tick of a timer; an exception escaping a Faust timer stops the whole worker."""
    try:
        await work
    except StoreError as exc:
        log.warning("%s skipped this tick: %s", name, exc)
    except Exception:
        log.exception("%s failed this tick", name)


def register_lag(app: faust.App, settings: Settings, stage: str) -> None:
    """How many partitions `stage`'s consumer group gave this process, and their lag (one app per stage)."""

    @app.timer(interval=settings.lag_refresh_seconds)  # type: ignore[untyped-decorator]
    async def lag_timer() -> None:
        metrics.ASSIGNED_PARTITIONS.labels(stage=stage).set(len(app.consumer.assignment()))
        await survive("consumer lag", refresh_lag(app))


def register_counts(app: faust.App, settings: Settings, runtime: Runtime, leader: Callable[[], bool]) -> None:
    """Memory counts from the leader alone: they are fleet totals, and the dashboards sum every process's series.

    A process that stops being the leader drops its series, so a stale copy
    is never summed with the new leader's.
    """

    @app.timer(interval=settings.gauge_refresh_seconds)  # type: ignore[untyped-decorator]
    async def counts_timer() -> None:
        if leader():
            await survive("memory counts", refresh_memory_counts(runtime))
        else:
            metrics.MEMORIES.clear()
