"""Watching a running stack from outside: its metrics, its changes topic, its processes."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import httpx
import orjson
from aiokafka import AIOKafkaConsumer
from prometheus_client.parser import text_string_to_metric_families


def percentiles(samples: Sequence[float], points: Sequence[int] = (50, 95, 99)) -> dict[str, float]:
    """Nearest-rank percentiles; empty input gives an empty dict, not a crash."""
    if not samples:
        return {}
    ordered = sorted(samples)
    return {f"p{p}": ordered[min(len(ordered) - 1, max(0, -(-p * len(ordered) // 100) - 1))] for p in points}


async def scrape(client: httpx.AsyncClient, name: str) -> list[tuple[dict[str, str], float]]:
    """Samples of one metric family from the stack's /metrics."""
    text = (await client.get("/metrics")).text
    return [
        (sample.labels, sample.value)
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name
    ]


async def wait_drained(client: httpx.AsyncClient, within: float, quiet_polls: int = 3) -> bool:
    """True once every consumer-lag gauge reads 0 on `quiet_polls` polls in a row."""
    deadline = time.monotonic() + within
    quiet = 0
    while time.monotonic() < deadline:
        lags = await scrape(client, "memstream_consumer_lag_messages")
        quiet = quiet + 1 if lags and all(v == 0 for _, v in lags) else 0
        if quiet >= quiet_polls:
            return True
        await asyncio.sleep(1.0)
    return False


async def pin_to_log_end(consumer: AIOKafkaConsumer, within: float = 30.0) -> None:
    """Position every assigned partition at its log end, as a fetch response reports it.

    Not seek_to_end() alone: tansu's ListOffsets "latest" answers the first
    offset of a recent batch plus one, short of the end (README, the embedded
    broker), while the high watermark in its fetch responses is exact. So:
    seek to that early end, fetch until every partition has reported its high
    watermark (the records fetched meanwhile predate the pin), then seek there.
    """
    await consumer.seek_to_end()
    partitions = consumer.assignment()
    deadline = time.monotonic() + within
    while any(consumer.highwater(tp) is None for tp in partitions):
        if time.monotonic() > deadline:
            raise TimeoutError(f"no fetch response for {partitions} within {within}s")
        await consumer.getmany(timeout_ms=100)
    for tp in partitions:
        consumer.seek(tp, consumer.highwater(tp))


class ChangeWatcher:
    """Consumes memory.changes from its end and calls `on_change(change, arrival)` for each."""

    def __init__(self, bootstrap: str, on_change: Callable[[dict[str, Any], float], None]) -> None:
        self._consumer = AIOKafkaConsumer(
            "memory.changes", bootstrap_servers=bootstrap, auto_offset_reset="latest", fetch_max_wait_ms=50
        )
        self._on_change = on_change
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> ChangeWatcher:
        await self._consumer.start()
        # Pin the starting offsets now, so nothing produced after this is missed.
        await pin_to_log_end(self._consumer)
        self._task = asyncio.create_task(self._run())
        return self

    async def _run(self) -> None:
        async for message in self._consumer:
            if message.value is not None:
                self._on_change(orjson.loads(message.value), time.perf_counter())

    async def __aexit__(self, *_: object) -> None:
        if self._task is not None:
            self._task.cancel()
        await self._consumer.stop()


def peak_rss_mib(pid: int) -> float | None:
    """The process's high-water resident set (VmHWM), or None when it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None
