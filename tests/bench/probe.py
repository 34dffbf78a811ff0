"""Watching a running stack from outside: its metrics, its changes topic, its processes."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Self

import httpx
from aiokafka import AIOKafkaConsumer
from prometheus_client.parser import text_string_to_metric_families

from services.archive.changes import open_changes
from services.archive.keys import KeyStore
from services.core import topics
from services.core.config import Settings
from services.kafka.log_tail import pin_to_log_end
from services.stores.postgres import PgPool

__all__ = ["ChangeWatcher", "peak_rss_mib", "percentiles", "pin_to_log_end", "scrape", "wait_drained"]


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


class TailWatcher:
    """Consumes `topics` from their end (pinned on entry, so nothing produced after it is missed) and hands each
    fetched batch, with when it arrived, to `on_batch`, until the block exits."""

    def __init__(self, bootstrap: str, *topic_names: str) -> None:
        self._consumer = AIOKafkaConsumer(
            *topic_names, bootstrap_servers=bootstrap, auto_offset_reset="latest", fetch_max_wait_ms=50
        )
        self._task: asyncio.Task[None] | None = None

    async def on_batch(self, fetched: dict[Any, list[Any]], arrival: float) -> None:
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        await self._consumer.start()
        await pin_to_log_end(self._consumer)
        self._task = asyncio.create_task(self._run())
        return self

    async def _run(self) -> None:
        while True:
            fetched = await self._consumer.getmany(timeout_ms=1000)
            await self.on_batch(fetched, time.perf_counter())

    async def __aexit__(self, *_: object) -> None:
        if self._task is not None:
            self._task.cancel()
        await self._consumer.stop()


class ChangeWatcher(TailWatcher):
    """Consumes memory.changes from its end and calls `on_change(change, arrival)` for each change it can open.

    Changes are sealed per user (services/archive/changes.py): each fetched
    batch is opened with one lookup of its users' keys in the stack's
    Postgres, with the stack's master key. `change` is the opened MemoryChange
    (or UserForgotten) as JSON; `arrival` is when its batch was fetched,
    before opening, so the key lookup is not counted as the pipeline's time.
    """

    def __init__(self, settings: Settings, on_change: Callable[[dict[str, Any], float], None]) -> None:
        super().__init__(settings.kafka_bootstrap, topics.CHANGES)
        self._pool = PgPool(settings.pg_dsn, 2)
        self._keys = KeyStore.from_settings(self._pool, settings)
        self._on_change = on_change

    async def __aenter__(self) -> Self:
        await self._pool.open()
        return await super().__aenter__()

    async def on_batch(self, fetched: dict[Any, list[Any]], arrival: float) -> None:
        values = [m.value for messages in fetched.values() for m in messages if m.value is not None]
        if values:
            opened, _ = await open_changes(self._keys, values)
            for change in opened:
                self._on_change(change.model_dump(mode="json"), arrival)

    async def __aexit__(self, *exc: object) -> None:
        await super().__aexit__(*exc)
        await self._pool.close()


def _status_mib(pid: int, field: str) -> float | None:
    """One kB figure of /proc/<pid>/status in MiB, or None when the process is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def anon_rss_mib(pid: int) -> float | None:
    """The process's resident anonymous memory now (RssAnon): the part the kernel cannot drop and read back.

    The rest of the RSS is file pages (RssFile), such as an index's memory-mapped segments: they count while
    mapped and resident, but under memory pressure the kernel evicts them.
    """
    return _status_mib(pid, "RssAnon")


def peak_rss_mib(pid: int) -> float | None:
    """The process's high-water resident set (VmHWM), or None when it is gone."""
    return _status_mib(pid, "VmHWM")
    return None
