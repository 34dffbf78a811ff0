"""Producing to Kafka from asyncio through librdkafka (confluent-kafka), idempotently.

Why confluent-kafka: its idempotent producer (`enable.idempotence`) is granted
a producer id by the embedded broker (tansu), where aiokafka's fails. With it
the broker drops a batch the producer resends after a lost acknowledgement,
instead of writing a turn twice.

Why `murmur2_random`: it puts a key on the partition aiokafka, Faust and the
Java client choose (librdkafka's own default, CRC32, would not), so one
user's turns stay in one partition, in order, whichever client produced them.

librdkafka hands out delivery reports only from `poll()`. A daemon thread
polls, and passes each report to the event loop with `call_soon_threadsafe`;
flushing runs in a worker thread. Nothing here blocks the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar, cast

import orjson
from confluent_kafka import KafkaError, KafkaException, Message, Producer
from opentelemetry.trace import SpanKind

from schemas import SessionEvent, TurnEvent, dumps, partition_key
from services.core import topics, tracing
from services.core.errors import MemstreamError

log = logging.getLogger(__name__)

TURNS_TOPIC = topics.TURNS
# Messages librdkafka may hold before `produce` raises BufferError (then we wait for room).
_QUEUE_MESSAGES = 500_000
_POLL_SECONDS = 0.1
_FULL_QUEUE_WAIT = 0.005
R = TypeVar("R")


class ProduceFailed(MemstreamError):
    """The broker did not acknowledge a message: unreachable within the message timeout, or it refused it."""

    def __init__(self, error: KafkaError) -> None:
        super().__init__(f"{error.name()}: {error.str()}")
        self.error = error

    @property
    def retriable(self) -> bool:
        """True for an outage (timeouts, no broker); False when the message itself was refused (too large, ...)."""
        code = self.error.code()
        return bool(self.error.retriable()) or code in (KafkaError._MSG_TIMED_OUT, KafkaError._TRANSPORT)


@dataclass(frozen=True)
class Delivered:
    """Where the broker put a message."""

    partition: int
    offset: int


def key_of(raw: bytes) -> bytes:
    """tenant:user from a raw message, or b"unknown" when it is not parseable."""
    try:
        data = orjson.loads(raw)
        return partition_key(str(data["tenant_id"]), str(data["user_id"]))
    except (orjson.JSONDecodeError, KeyError, TypeError):
        return b"unknown"


def producer_config(
    bootstrap: str, *, message_timeout: float, linger_ms: int = 5, extra: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """librdkafka settings for an idempotent, key-compatible producer; `extra` adds or overrides (SASL, tests).

    `message_timeout` bounds how long a message may wait for the broker
    (retries included) before its delivery fails: an outage surfaces as an
    error, not as a wait of librdkafka's default five minutes.
    """
    return {
        "bootstrap.servers": bootstrap,
        "enable.idempotence": True,  # implies acks=all and ordered retries
        "partitioner": "murmur2_random",
        "linger.ms": linger_ms,
        "message.timeout.ms": max(int(message_timeout * 1000), linger_ms + 1),
        "queue.buffering.max.messages": _QUEUE_MESSAGES,
        "logger": logging.getLogger("librdkafka"),
        **(extra or {}),
    }


class AsyncProducer:
    """One librdkafka producer with a future per message; `start()` on the loop that awaits the futures."""

    def __init__(self, config: Mapping[str, Any]) -> None:
        self._config = {**config, "error_cb": self._on_error}
        self._producer: Producer | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._fatal: KafkaError | None = None

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._producer = Producer(self._config)
        self._thread = threading.Thread(target=self._poll, name="kafka-producer-poll", daemon=True)
        self._thread.start()

    @property
    def broken(self) -> bool:
        """librdkafka raised a fatal error (an idempotence invariant broke): this producer can send no more."""
        return self._fatal is not None

    def _poll(self) -> None:
        """Until close(), or until the loop is closed unawaited (a server run without lifespan): nobody to report to."""
        producer, loop = self._producer, self._loop
        assert producer is not None
        assert loop is not None
        while not self._stop.is_set() and not loop.is_closed():
            producer.poll(_POLL_SECONDS)

    def _on_error(self, error: KafkaError) -> None:
        """Client-level errors (on the poll thread): a fatal one retires the producer.

        The rest (a broker down, a connection refused) librdkafka also logs
        through the `librdkafka` logger, and each message's delivery reports it.
        """
        if error.fatal():
            self._fatal = error
            log.error("Kafka producer failed for good: %s", error.str())
        else:
            log.debug("Kafka producer: %s", error.str())

    async def send(
        self, topic: str, key: bytes, value: bytes, headers: Sequence[tuple[str, bytes]] | None = None
    ) -> asyncio.Future[Delivered]:
        """Queue one message; the returned future resolves when the broker acknowledged it (or fails).

        Waits (without blocking the loop) while librdkafka's queue is full.
        """
        producer, loop = self._producer, self._loop
        if producer is None or loop is None:
            raise RuntimeError("AsyncProducer.send before start()")
        if self._fatal is not None:
            raise ProduceFailed(self._fatal)
        future: asyncio.Future[Delivered] = loop.create_future()
        listed: list[tuple[str, str | bytes | None]] | None = list(headers) if headers else None

        def report(error: KafkaError | None, message: Message) -> None:  # the poll (or flush) thread
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody is waiting any more
                loop.call_soon_threadsafe(_settle, future, error, message)

        while True:
            try:
                producer.produce(topic, value=value, key=key, headers=listed, on_delivery=report)
                return future
            except BufferError:
                await asyncio.sleep(_FULL_QUEUE_WAIT)
            except KafkaException as exc:
                raise ProduceFailed(exc.args[0]) from exc

    async def close(self, flush_seconds: float = 10.0) -> int:
        """Stop polling, then wait up to `flush_seconds` for what is queued; returns how many were left undelivered."""
        self._stop.set()
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join)
        if self._producer is None:
            return 0
        left: int = await asyncio.to_thread(self._producer.flush, flush_seconds)
        if left:
            log.warning("Kafka producer closed with %d messages undelivered", left)
        return left


def _settle(future: asyncio.Future[Delivered], error: KafkaError | None, message: Message) -> None:
    if future.done():  # the waiter gave up (a request past its deadline)
        return
    if error is not None:
        future.set_exception(ProduceFailed(error))
    else:
        future.set_result(Delivered(partition=int(message.partition() or 0), offset=int(message.offset() or 0)))


async def acknowledged(pending: Sequence[Awaitable[R]]) -> list[R]:
    """Every acknowledgement, or the first failure once all have settled (no exception is left unretrieved).

    For any producer's delivery futures: librdkafka's here, Faust's in the stages.
    """
    results = await asyncio.gather(*pending, return_exceptions=True)
    failed = next((r for r in results if isinstance(r, BaseException)), None)
    if failed is not None:
        raise failed
    return cast(list[R], results)


class TurnProducer:
    """`async with TurnProducer(bootstrap) as p: await p.send(turn)`: chat events to `chat.turns`, keyed tenant:user.

    `message_timeout`: how long a message may wait for the broker before its
    send fails. `config`: further librdkafka settings (SASL, tests).
    """

    def __init__(
        self,
        bootstrap: str,
        topic: str = TURNS_TOPIC,
        *,
        message_timeout: float = 30.0,
        config: Mapping[str, Any] | None = None,
    ) -> None:
        self._producer = AsyncProducer(producer_config(bootstrap, message_timeout=message_timeout, extra=config))
        self._topic = topic

    async def start(self) -> None:
        await self._producer.start()

    async def close(self, flush_seconds: float = 10.0) -> int:
        return await self._producer.close(flush_seconds)

    async def __aenter__(self) -> TurnProducer:
        await self.start()
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    @property
    def broken(self) -> bool:
        return self._producer.broken

    async def send(self, event: TurnEvent | SessionEvent) -> Delivered:
        return (await self.send_events([event]))[0]

    async def send_events(self, events: Iterable[TurnEvent | SessionEvent]) -> list[Delivered]:
        """All of them, in order per user; returns once the broker acknowledged every one (or raises ProduceFailed)."""
        return await acknowledged([await self._traced(e.key, dumps(e)) for e in events])

    async def send_raw(self, lines: Iterable[bytes]) -> int:
        """Sends bytes as they are (validation is the pipeline's job); returns the count once all are acknowledged."""
        pending = [await self._traced(key_of(line), line) for line in lines]
        return len(await acknowledged(pending))

    async def _traced(self, key: bytes, value: bytes) -> asyncio.Future[Delivered]:
        """Queue one turn; with tracing on, under its own span, whose context its headers carry to the stages."""
        if not tracing.enabled():
            return await self._producer.send(self._topic, key, value)
        with tracing.tracer().start_as_current_span(f"{self._topic} publish", kind=SpanKind.PRODUCER) as span:
            span.set_attribute(tracing.TENANT, key.split(b":", 1)[0].decode("utf-8", "replace"))
            return await self._producer.send(self._topic, key, value, tracing.outgoing_headers())


class _Restartable(Protocol):
    @property
    def broken(self) -> bool: ...

    async def start(self) -> None: ...

    async def close(self, flush_seconds: float = 10.0) -> int: ...


P = TypeVar("P", bound=_Restartable)


class ProducerSlot(Generic[P]):
    """A long-lived service's one producer: started on first use, replaced once it breaks for good.

    A fatal librdkafka error (e.g. a fenced idempotent producer) leaves a
    producer that can never deliver again; the next caller gets a new one.
    """

    def __init__(self, make: Callable[[], P]) -> None:
        self._make = make
        self._producer: P | None = None
        self._lock = asyncio.Lock()

    async def current(self) -> P:
        async with self._lock:
            if self._producer is not None and self._producer.broken:
                stale, self._producer = self._producer, None
                await stale.close(flush_seconds=0)
            if self._producer is None:
                producer = self._make()
                await producer.start()
                self._producer = producer
            return self._producer

    async def close(self) -> None:
        if self._producer is not None:
            await self._producer.close()
            self._producer = None
