"""Access marks: recall tells the consolidator what it returned, coalesced, through `memory.commands`.

The read path never writes, and a mark must never fail or slow
a recall: `mark()` only counts the returned memories in the current window
and returns. Every `flush_seconds` one background task sends the window as
one access command per user (at most 100 memories each): one mark per
memory per window, carrying how many recalls returned it and the latest of
them. So read traffic costs the log one entry per memory a window, however
many recalls there are, and the consolidator applies it to Postgres's access
columns without publishing anything (access is not a change of the memory).
Each carries backlog.READ_SIDE, so a window's burst never reads as ingest
falling behind (recall would then give way to its own marks).

When Kafka is down the window is kept and merged into the next one (counts
add up), bounded by `max_pending` memories: a memory beyond it is dropped
and counted; so is a window whose send fails. A lost mark costs a little
ranking signal, a failed recall would cost an answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from schemas import dumps
from schemas.commands import AccessCommand
from services.core import topics
from services.core.backlog import READ_SIDE
from services.core.config import Settings
from services.core.kafka_auth import aiokafka_kwargs
from services.core.metrics import ACCESS_MARKS
from services.core.textutil import stable_id

log = logging.getLogger(__name__)

MAX_IDS = 100  # AccessCommand's limit; top_k is capped at 100 too

Owner = tuple[str, str]  # (tenant_id, user_id)


@dataclass(frozen=True)
class Seen:
    """One memory in one window: how many recalls returned it, and the latest of them."""

    count: int
    last: datetime

    def plus(self, other: Seen) -> Seen:
        return Seen(self.count + other.count, max(self.last, other.last))


Window = dict[Owner, dict[str, Seen]]


class Producer(Protocol):
    """The part of AIOKafkaProducer used here (a fake in tests)."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def send(self, topic: str, value: bytes, key: bytes, headers: Sequence[tuple[str, bytes]]) -> Any: ...


def kafka_producer(settings: Settings) -> Producer:
    from aiokafka import AIOKafkaProducer

    # acks=1: a mark is worth one broker round trip, not a wait for replicas.
    producer: Producer = AIOKafkaProducer(
        bootstrap_servers=settings.kafka_bootstrap,
        acks=1,
        linger_ms=5,
        request_timeout_ms=5000,
        **aiokafka_kwargs(settings),
    )
    return producer


def access_commands(tenant_id: str, user_id: str, seen: Mapping[str, Seen], window_id: str) -> list[AccessCommand]:
    """One user's window as commands: one mark per memory (count and last access), 100 memories a command.

    The id names the window and the chunk, so a command the producer sends
    twice is applied once; `at` is the chunk's latest access.
    """
    ids = list(seen)
    chunks = [ids[i : i + MAX_IDS] for i in range(0, len(ids), MAX_IDS)]
    return [
        AccessCommand(
            command_id=stable_id("access", tenant_id, user_id, window_id, str(n)),
            tenant_id=tenant_id,
            user_id=user_id,
            memory_ids=chunk,
            counts=[seen[i].count for i in chunk],
            last_accessed=[seen[i].last for i in chunk],
            at=max(seen[i].last for i in chunk),
        )
        for n, chunk in enumerate(chunks)
    ]


def merge(into: Window, window: Window) -> None:
    """Add `window`'s marks to `into` (a window that could not be sent joins the next one)."""
    for owner, seen in window.items():
        held = into.setdefault(owner, {})
        for memory_id, mark in seen.items():
            before = held.get(memory_id)
            held[memory_id] = mark if before is None else before.plus(mark)


class AccessMarks:
    """Coalescing, fire-and-forget sender of access marks, started lazily on the first mark."""

    def __init__(
        self,
        make_producer: Callable[[], Producer],
        *,
        topic: str = topics.COMMANDS,
        flush_seconds: float = 5.0,
        max_pending: int = 10_000,
        connect_timeout: float = 5.0,
        retry_delay: float = 2.0,
    ) -> None:
        self._make_producer = make_producer
        self._topic = topic
        self._flush_seconds = flush_seconds
        self._max_pending = max_pending
        self._connect_timeout = connect_timeout
        self._retry_delay = retry_delay
        self._window: Window = {}
        self._pending = 0  # memories in the window (and any held back from an unsent one)
        self._in_flight = 0
        self._process = uuid.uuid4().hex  # window ids are unique per process
        self._windows = 0
        self._producer: Producer | None = None
        self._task: asyncio.Task[None] | None = None
        self._stopped: asyncio.Future[None] | None = None
        self.recorded = 0  # accesses taken in (a memory returned by a recall), coalesced or not

    def mark(self, tenant_id: str, user_id: str, memory_ids: Sequence[str], at: datetime) -> None:
        """Count the memories one recall returned in the current window; never blocks, never raises."""
        if not memory_ids:
            return
        try:
            if self._task is None or self._task.done():
                loop = asyncio.get_running_loop()
                self._stopped = loop.create_future()
                self._task = loop.create_task(self._run(self._stopped), name="access-marks")
            seen = self._window.setdefault((tenant_id, user_id), {})
            for memory_id in dict.fromkeys(memory_ids):
                before = seen.get(memory_id)
                if before is not None:
                    seen[memory_id] = before.plus(Seen(1, at))
                elif self._pending >= self._max_pending:
                    ACCESS_MARKS.labels(outcome="dropped").inc()
                    continue
                else:
                    seen[memory_id] = Seen(1, at)
                    self._pending += 1
                self.recorded += 1
            if not seen:
                del self._window[(tenant_id, user_id)]
        except Exception:
            log.exception("access mark dropped")
            ACCESS_MARKS.labels(outcome="dropped").inc()

    @property
    def pending(self) -> int:
        """Marks not yet sent: one per memory per user, in the window or on their way."""
        return self._pending + self._in_flight

    async def flush(self) -> None:
        """Send the window now (the background task does it every `flush_seconds`)."""
        window, self._window, self._pending = self._window, {}, 0
        if not window:
            return
        marks = sum(len(seen) for seen in window.values())
        self._in_flight = marks
        try:
            if self._producer is None:
                self._producer = await self._connect()
            if self._producer is None:  # Kafka down: the marks wait for the next window
                self._restore(window)
                return
            self._windows += 1
            window_id = f"{self._process}:{self._windows}"
            batch = [c for (t, u), seen in window.items() for c in access_commands(t, u, seen, window_id)]
            if not await self._send(self._producer, batch, marks):
                await self._drop_producer()
        except asyncio.CancelledError:
            ACCESS_MARKS.labels(outcome="dropped").inc(marks)
            raise
        finally:
            self._in_flight = 0

    async def close(self) -> None:
        """Stop the timer; send what the window holds if the broker is connected (a shutdown never waits for one)."""
        task, self._task = self._task, None
        if task is not None and self._stopped is not None:
            # The timer ends on its own between windows; one stuck in a send is cancelled.
            self._stopped.set_result(None)
            await asyncio.wait([task], timeout=self._connect_timeout * 2)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._producer is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.flush(), self._connect_timeout * 2)
        if self._pending:
            ACCESS_MARKS.labels(outcome="dropped").inc(self._pending)
            self._window, self._pending = {}, 0
        await self._drop_producer()

    def _restore(self, window: Window) -> None:
        """Put an unsent window back under the newer marks, within the bound; the excess is dropped."""
        newer, self._window = self._window, {}
        merge(self._window, window)
        merge(self._window, newer)
        self._pending = sum(len(seen) for seen in self._window.values())
        excess = self._pending - self._max_pending
        if excess > 0:
            ACCESS_MARKS.labels(outcome="dropped").inc(excess)
            for owner in list(self._window):
                seen = self._window[owner]
                while seen and excess > 0:
                    seen.pop(next(iter(seen)))
                    excess -= 1
                if not seen:
                    del self._window[owner]
            self._pending = self._max_pending

    async def _connect(self) -> Producer | None:
        producer = self._make_producer()
        try:
            await asyncio.wait_for(producer.start(), self._connect_timeout)
            return producer
        except Exception as exc:  # Kafka down: marks are held for the next window
            log.warning("access marks: Kafka unavailable, retrying in %.1fs: %r", self._retry_delay, exc)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(producer.stop(), self._connect_timeout)
            return None

    async def _drop_producer(self) -> None:
        producer, self._producer = self._producer, None
        if producer is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(producer.stop(), self._connect_timeout)

    async def _run(self, stopped: asyncio.Future[None]) -> None:
        """Close a window every `flush_seconds` until `close()` (waits, not cancellation, end it)."""
        while True:
            await asyncio.wait([stopped], timeout=self._flush_seconds)
            if stopped.done():
                return
            try:
                await self.flush()
            except Exception:
                log.exception("access marks: window dropped")
            if self._producer is None and self._pending:
                await asyncio.wait([stopped], timeout=self._retry_delay)

    async def _send(self, producer: Producer, batch: list[AccessCommand], marks: int) -> bool:
        """Send a window and wait for the broker once; a failure drops (and counts) its marks."""
        try:
            sent = [await producer.send(self._topic, value=dumps(c), key=c.key, headers=[READ_SIDE]) for c in batch]
            await asyncio.wait_for(asyncio.gather(*sent), self._connect_timeout * 2)
        except Exception as exc:
            log.warning("access marks: %d dropped: %r", marks, exc)
            ACCESS_MARKS.labels(outcome="dropped").inc(marks)
            return False
        ACCESS_MARKS.labels(outcome="sent").inc(marks)
        return True
