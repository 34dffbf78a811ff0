"""Access marks: recall tells the consolidator what it returned, through `memory.commands`.

The read path never writes (DESIGN §6), and a mark must never fail or slow
a recall: `mark()` only puts a command on a bounded queue and returns; one
background task sends the queue to Kafka. When the queue is full (Kafka down
or slow) the command is dropped and counted; so is a command whose send
fails. A lost mark costs a little ranking signal, a failed recall would cost
an answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, Protocol

from prometheus_client import Counter

from schemas import dumps
from schemas.commands import AccessCommand
from services import topics
from services.config import Settings
from services.kafka_auth import aiokafka_kwargs
from services.textutil import stable_id

log = logging.getLogger(__name__)

MAX_IDS = 100  # AccessCommand's limit; top_k is capped at 100 too
ACCESS_MARKS = Counter(
    "memstream_access_marks_total", "Access commands from recall, by outcome (sent, dropped)", ["outcome"]
)
for _outcome in ("sent", "dropped"):
    ACCESS_MARKS.labels(outcome=_outcome)


class Producer(Protocol):
    """The part of AIOKafkaProducer used here (a fake in tests)."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def send(self, topic: str, value: bytes, key: bytes) -> Any: ...


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


def access_commands(tenant_id: str, user_id: str, memory_ids: Sequence[str], at: datetime) -> list[AccessCommand]:
    """The commands for one recall: one naming every returned memory (chunks of 100 if ever more).

    The id is derived from what the recall returned and when, so a command
    sent twice is applied once.
    """
    ids = list(dict.fromkeys(memory_ids))
    chunks = [ids[i : i + MAX_IDS] for i in range(0, len(ids), MAX_IDS)]
    return [
        AccessCommand(
            command_id=stable_id("access", tenant_id, user_id, at.isoformat(), str(n), *chunk),
            tenant_id=tenant_id,
            user_id=user_id,
            memory_ids=chunk,
            at=at,
        )
        for n, chunk in enumerate(chunks)
    ]


class AccessMarks:
    """Fire-and-forget sender of access commands, started lazily on the first mark."""

    def __init__(
        self,
        make_producer: Callable[[], Producer],
        *,
        topic: str = topics.COMMANDS,
        max_pending: int = 1000,
        connect_timeout: float = 5.0,
        retry_delay: float = 2.0,
    ) -> None:
        self._make_producer = make_producer
        self._topic = topic
        self._queue: asyncio.Queue[AccessCommand] = asyncio.Queue(max_pending)
        self._connect_timeout = connect_timeout
        self._retry_delay = retry_delay
        self._task: asyncio.Task[None] | None = None

    def mark(self, tenant_id: str, user_id: str, memory_ids: Sequence[str], at: datetime) -> None:
        """Queue the marks of one recall; never blocks, never raises."""
        if not memory_ids:
            return
        try:
            if self._task is None or self._task.done():
                self._task = asyncio.get_running_loop().create_task(self._run(), name="access-marks")
            for command in access_commands(tenant_id, user_id, memory_ids, at):
                self._queue.put_nowait(command)
        except asyncio.QueueFull:
            ACCESS_MARKS.labels(outcome="dropped").inc()
        except Exception:
            log.exception("access mark dropped")
            ACCESS_MARKS.labels(outcome="dropped").inc()

    @property
    def pending(self) -> int:
        return self._queue.qsize()

    async def close(self) -> None:
        """Stop sending; what is still queued is dropped (marks are best effort)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _connect(self) -> Producer | None:
        producer = self._make_producer()
        try:
            await asyncio.wait_for(producer.start(), self._connect_timeout)
            return producer
        except Exception as exc:  # Kafka down: the queue fills, new marks are dropped
            log.warning("access marks: Kafka unavailable, retrying in %.1fs: %r", self._retry_delay, exc)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(producer.stop(), self._connect_timeout)
            return None

    async def _run(self) -> None:
        producer: Producer | None = None
        try:
            while True:
                first = await self._queue.get()
                while producer is None:
                    producer = await self._connect()
                    if producer is None:
                        await asyncio.sleep(self._retry_delay)
                batch = [first]
                while not self._queue.empty():
                    batch.append(self._queue.get_nowait())
                if not await self._send(producer, batch):
                    with contextlib.suppress(Exception):
                        await asyncio.wait_for(producer.stop(), self._connect_timeout)
                    producer = None
        finally:
            if producer is not None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(producer.stop(), self._connect_timeout)

    async def _send(self, producer: Producer, batch: list[AccessCommand]) -> bool:
        """Send a batch and wait for the broker once; a failure drops (and counts) the batch."""
        try:
            pending = [await producer.send(self._topic, value=dumps(c), key=c.key) for c in batch]
            await asyncio.wait_for(asyncio.gather(*pending), self._connect_timeout * 2)
        except Exception as exc:
            log.warning("access marks: %d dropped: %r", len(batch), exc)
            ACCESS_MARKS.labels(outcome="dropped").inc(len(batch))
            return False
        ACCESS_MARKS.labels(outcome="sent").inc(len(batch))
        return True
