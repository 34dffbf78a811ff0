"""A batch's offsets become committable only after its effects are durable, through Faust's own take_events.

Each test runs a real Faust agent (its test context: no broker) over the
stages' own loops (`batched_agent`, `consume_parsed`). A message is
committable once Faust marks it acknowledged (`Message.acked`), which is what
the consumer's commit reads. Faust's conductor gives every message from Kafka
one reference per stream reading it; the test context does not, so `Stage.put`
adds that reference as the conductor would. Against the embedded stack:
tests/e2e/test_offsets.py.
"""

from __future__ import annotations

import asyncio
import gc
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import faust
from aiokafka.errors import (
    KafkaConnectionError,
    KafkaTimeoutError,
    MessageSizeTooLargeError,
    NotLeaderForPartitionError,
)
from faust.exceptions import ProducerSendError
from faust.types import Message
from pydantic import BaseModel

from agents.dlq import DeadLetters
from agents.stage import batched_agent, consume_parsed, deliver
from services.core.config import Settings
from services.core.errors import InvalidEvent, StoreUnavailable
from services.kafka.dead_letters import REASON_HEADER
from services.kafka.producer import AsyncProducer, producer_config
from tests.unit.test_producer import refused_port


class Note(BaseModel):
    n: int


@dataclass
class DlqTopic:
    """memory.dlq as a Faust topic: refuses the first `refusals` sends the way Kafka clients do, then keeps them."""

    refusals: int = 0
    sent: list[dict[str, Any]] = field(default_factory=list)
    refused: int = 0

    async def send(self, *, key: bytes | None, value: bytes | None, headers: dict[str, bytes]) -> asyncio.Future[None]:
        delivered: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self.refused < self.refusals:
            self.refused += 1
            if self.refused % 2:  # the send cannot start (Faust wraps aiokafka's error)
                raise ProducerSendError(f"Error while sending: {MessageSizeTooLargeError()!r}")
            delivered.set_exception(KafkaTimeoutError())  # sent, never acknowledged
            return delivered
        self.sent.append({"key": key, "value": value, "headers": headers})
        delivered.set_result(None)
        return delivered


@dataclass
class Stage:
    app: faust.App
    agent: Any
    messages: list[Message] = field(default_factory=list)

    async def put(self, value: bytes) -> Message:
        """One message on the stage's input topic, referenced once, as Faust's conductor hands a Kafka message on."""
        event = await self.agent.put(value, key=b"t:u", wait=False)
        message: Message = event.message
        message.incref()
        self.messages.append(message)
        return message

    def acked(self) -> list[bool]:
        return [m.acked for m in self.messages]


@asynccontextmanager
async def running(register: Callable[[faust.App, Any], None]) -> AsyncIterator[Stage]:
    """A Faust app whose one agent `register` adds on a raw-bytes input topic; stopped (its task cancelled) on exit."""
    app = faust.App(
        f"offsets-{uuid.uuid4().hex[:8]}", broker="kafka://127.0.0.1:1", store="memory://", web_enabled=False
    )
    source = app.topic("memory.source", key_type=bytes, value_type=bytes, key_serializer="raw", value_serializer="raw")
    register(app, source)
    (name,) = app.agents
    async with app.agents[name].test_context() as agent:
        yield Stage(app, agent)


async def until(probe: Callable[[], bool]) -> None:
    """Wait (5 s at most) for `probe()` to hold."""
    for _ in range(500):
        if probe():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition not reached within 5 s")


async def settled() -> None:
    """Let abandoned generators be finalized (their `finally` blocks are where Faust acknowledges)."""
    for _ in range(3):
        gc.collect()
        await asyncio.sleep(0.05)


def batched(
    tmp_path: Path, handle: Callable[[list[Note]], Awaitable[None]], dlq: DlqTopic
) -> Callable[[faust.App, Any], None]:
    settings = Settings(data_dir=tmp_path, retry_max_backoff=0.02)

    def register(app: faust.App, source: Any) -> None:
        batched_agent(
            app, source, dlq, settings, keys=None, stage="offsets", model=Note, size=3, within=0.05, handle=handle
        )

    return register


async def test_a_batch_is_acknowledged_once_handled(tmp_path: Path) -> None:
    handled: list[int] = []

    async def handle(notes: list[Note]) -> None:
        handled.extend(n.n for n in notes)

    async with running(batched(tmp_path, handle, DlqTopic())) as stage:
        for n in range(3):
            await stage.put(b'{"n": %d}' % n)
        await until(lambda: all(stage.acked()))
    assert handled == [0, 1, 2]


async def test_a_worker_stopped_while_its_batch_waits_out_an_outage_commits_none_of_it(tmp_path: Path) -> None:
    """A SIGTERM stops the agents (their tasks cancelled) while `deliver` sleeps between retries."""
    attempts = 0

    async def handle(notes: list[Note]) -> None:
        nonlocal attempts
        attempts += 1
        raise StoreUnavailable("postgres: connection refused")

    async with running(batched(tmp_path, handle, DlqTopic())) as stage:
        for n in range(3):
            await stage.put(b'{"n": %d}' % n)
        await until(lambda: attempts >= 3)
    await settled()
    assert stage.acked() == [False, False, False]


async def test_a_dlq_that_refuses_writes_holds_the_batch_until_it_takes_the_item(tmp_path: Path) -> None:
    handled: list[int] = []

    async def handle(notes: list[Note]) -> None:
        handled.extend(n.n for n in notes)

    dlq = DlqTopic(refusals=4)
    async with running(batched(tmp_path, handle, dlq)) as stage:
        await stage.put(b'{"n": 1}')
        await stage.put(b'{"n": "not a number"}')
        await stage.put(b'{"n": 3}')
        await until(lambda: dlq.refused >= 2)
        assert stage.acked() == [False, False, False], "acknowledged while the DLQ refused the item"
        assert dlq.sent == []
        await until(lambda: all(stage.acked()))
    assert [m["value"] for m in dlq.sent] == [b'{"n": "not a number"}']
    assert dlq.sent[0]["headers"][REASON_HEADER] == b"schema_violation"
    assert handled == [1, 3]


async def test_a_dlq_refusing_writes_stops_nothing_but_its_batch_and_a_stop_commits_none_of_it(tmp_path: Path) -> None:
    async def handle(notes: list[Note]) -> None:
        pass

    dlq = DlqTopic(refusals=10**6)
    async with running(batched(tmp_path, handle, dlq)) as stage:
        await stage.put(b"not json")
        await stage.put(b'{"n": 2}')
        await until(lambda: dlq.refused >= 5)
    await settled()
    assert stage.acked() == [False, False]
    assert dlq.sent == []


async def test_an_exception_escaping_a_batch_leaves_it_unacknowledged_and_it_is_processed_again(
    tmp_path: Path,
) -> None:
    """Neither an outage nor bad data (a bug in reading): the batch is taken again, never skipped."""
    bugs = 3
    read_values: list[bytes | None] = []
    handled: list[bytes | None] = []

    def read(raw: bytes | None) -> bytes | None:
        nonlocal bugs
        read_values.append(raw)
        if raw == b"bug" and bugs:
            bugs -= 1
            raise RuntimeError("a bug in read")
        return raw

    async def handle(values: list[bytes | None]) -> None:
        handled.extend(values)

    def register(app: faust.App, source: Any) -> None:
        dlq = DeadLetters(DlqTopic(), 900 * 1024, None)

        async def stage(stream: Any) -> None:
            await consume_parsed(stream, read, handle, dlq, "offsets", size=2, within=0.05, max_delay=0.05)

        app.agent(source, name="offsets")(stage)

    async with running(register) as stage:
        await stage.put(b"ok")
        await stage.put(b"bug")
        await until(lambda: read_values.count(b"bug") == 2)
        assert stage.acked() == [False, False], "acknowledged while failing"
        await stage.put(b"later")
        await until(lambda: all(stage.acked()))
    assert handled == [b"ok", b"bug", b"later"]
    assert read_values == [b"ok", b"bug"] * 4 + [b"later"], "a batch was taken before the failing one passed"


# --- producer errors are outages, not bad data ---------------------------------------------


def source_message(offset: int = 0) -> Message:
    return Message("chat.turns", 0, offset, 0.0, 0, None, b"t:u", b"", b"")


@dataclass
class Event:
    value: bytes
    key: bytes = b"t:u"
    message: Message = field(default_factory=source_message)


async def produce_failed() -> Exception:
    """A real librdkafka delivery failure: a broker that refuses connections, a short message timeout."""
    producer = AsyncProducer(producer_config(refused_port(), message_timeout=0.2))
    await producer.start()
    try:
        future = await producer.send("memory.changes", b"t:u", b"{}")
        try:
            await future
        except Exception as exc:
            return exc
        raise AssertionError("delivered to a refused port")
    finally:
        await producer.close(flush_seconds=0)


async def test_producer_errors_from_a_handler_are_retried_and_never_dead_lettered() -> None:
    errors: list[Exception] = [
        KafkaConnectionError("no broker"),
        NotLeaderForPartitionError(),
        KafkaTimeoutError(),
        ProducerSendError("Error while sending: KafkaTimeoutError()"),
        await produce_failed(),
    ]
    calls = 0

    async def handle(values: list[str]) -> None:
        nonlocal calls
        calls += 1
        if calls <= len(errors):
            raise errors[calls - 1]

    dlq = DlqTopic()
    items = [(Event(b"a"), "a"), (Event(b"b"), "b")]
    await deliver(items, handle, DeadLetters(dlq, 900 * 1024, None), "consolidator", first_delay=0.001, max_delay=0.001)
    assert calls == len(errors) + 1
    assert dlq.sent == []


async def test_bad_data_still_goes_to_the_dlq_when_the_dlq_first_refuses_it() -> None:
    async def handle(values: list[str]) -> None:
        raise InvalidEvent("conflicting_duplicate", "known with different content")

    dlq = DlqTopic(refusals=3)
    await deliver(
        [(Event(b"dup", message=source_message(7)), "dup")],
        handle,
        DeadLetters(dlq, 900 * 1024, None, max_delay=0.001),
        "window",
    )
    assert dlq.refused == 3
    assert [m["headers"][REASON_HEADER] for m in dlq.sent] == [b"conflicting_duplicate"]
