"""Readiness: Kafka, Postgres and the recall index must each answer, and /readyz answers in time.

The probes run concurrently under one deadline; a probe that misses it
counts as not ready. A missed probe is cancelled but not awaited (a
cancelled psycopg query or Kafka connect can take seconds to unwind), and
while it unwinds that check reports not ready instead of starting another,
so a hammered /readyz during an outage never piles up stuck probes.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from aiokafka import AIOKafkaClient

from services.core.generations import DEFAULT
from services.core.kafka_auth import aiokafka_kwargs
from services.runtime import Runtime

if TYPE_CHECKING:
    from services.api.serving import ServingGeneration

log = logging.getLogger(__name__)

# The probes get this share of readyz_timeout; the rest is for answering.
_PROBE_SHARE = 0.8


class Readiness:
    """`serving`: the follower of the serving generation (services/api/serving.py), when the process has one.

    The Postgres and index probes ask the Runtime's current pool and index,
    so after a generation switch they check the generation that answers.
    """

    def __init__(self, rt: Runtime, serving: ServingGeneration | None = None) -> None:
        self._rt = rt
        self._serving = serving
        self.deadline = rt.settings.readyz_timeout * _PROBE_SHARE
        self._probes: dict[str, Callable[[], Awaitable[bool]]] = {
            "kafka": self._kafka,
            "postgres": lambda: self._rt.pg.ping(),
            "qdrant": lambda: self._rt.index.ping(),
        }
        if serving is not None and serving.replica is not None:
            # A read replica is ready once its own index has caught up with the log (services/api/replica.py).
            self._probes["index_replica"] = serving.replica_ready
        self._running: dict[str, asyncio.Task[bool]] = {}

    def report(self) -> dict[str, Any]:
        """What /readyz says beside the checks: the generation it serves, and the lag of any being rebuilt."""
        if self._serving is not None:
            return self._serving.report()
        return {"generation": self._rt.settings.generation or DEFAULT, "rebuilding": {}}

    async def _kafka(self) -> bool:
        """A fresh client per probe, so a broker that comes back is seen; bounded by the deadline."""
        timeout_ms = max(100, int(self.deadline * 1000))
        settings = self._rt.settings
        client = AIOKafkaClient(
            bootstrap_servers=settings.kafka_bootstrap, request_timeout_ms=timeout_ms, **aiokafka_kwargs(settings)
        )
        try:
            await client.bootstrap()
            return True
        finally:
            await client.close()

    def _start(self, name: str) -> asyncio.Task[bool] | None:
        """A new probe task, or None while the previous one is still unwinding."""
        previous = self._running.get(name)
        if previous is not None and not previous.done():
            return None
        task = asyncio.create_task(_as_coroutine(self._probes[name]), name=f"readyz-{name}")
        task.add_done_callback(lambda t: _log_outcome(name, t))
        self._running[name] = task
        return task

    async def check(self) -> dict[str, bool]:
        tasks = {name: self._start(name) for name in self._probes}
        live = {t for t in tasks.values() if t is not None}
        if live:
            await asyncio.wait(live, timeout=self.deadline)
        out: dict[str, bool] = {}
        for name, task in tasks.items():
            if task is None or not task.done():
                if task is not None:
                    task.cancel()
                log.info("readiness %s: no answer within %.2fs", name, self.deadline)
                out[name] = False
            else:
                out[name] = not task.cancelled() and task.exception() is None and task.result() is True
        return out


async def _as_coroutine(probe: Callable[[], Awaitable[bool]]) -> bool:
    return await probe()


def _log_outcome(name: str, task: asyncio.Task[bool]) -> None:
    """Also retrieves the exception of a probe nobody waits for any more."""
    if not task.cancelled() and (exc := task.exception()) is not None:
        log.info("readiness %s: %s", name, exc)
