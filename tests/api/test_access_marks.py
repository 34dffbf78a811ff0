"""Access marks leave recall without ever failing or slowing it: a fake producer stands in for Kafka."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from typing import Any

import orjson

from services.api.access import ACCESS_MARKS, AccessMarks, access_commands
from services.textutil import stable_id

AT = datetime(2026, 6, 1, tzinfo=UTC)
IDS = [stable_id("m", str(i)) for i in range(3)]


class FakeProducer:
    def __init__(self, *, up: bool = True, hang: bool = False) -> None:
        self.up = up
        self.hang = hang
        self.sent: list[tuple[str, bytes, bytes]] = []
        self.stopped = False

    async def start(self) -> None:
        if self.hang:
            await asyncio.sleep(3600)
        if not self.up:
            raise ConnectionError("no broker")

    async def stop(self) -> None:
        self.stopped = True

    async def send(self, topic: str, value: bytes, key: bytes) -> Any:
        self.sent.append((topic, key, value))
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done


def dropped() -> float:
    return float(ACCESS_MARKS.labels(outcome="dropped")._value.get())


def test_one_command_per_recall_names_every_returned_memory_and_its_id_is_deterministic() -> None:
    (cmd,) = access_commands("t", "u", [*IDS, IDS[0]], AT)
    assert cmd.memory_ids == IDS
    assert cmd.key == b"t:u"
    assert access_commands("t", "u", IDS, AT)[0].command_id == cmd.command_id
    assert access_commands("t", "u2", IDS, AT)[0].command_id != cmd.command_id
    many = access_commands("t", "u", [stable_id("m", str(i)) for i in range(250)], AT)
    assert [len(c.memory_ids) for c in many] == [100, 100, 50]
    assert len({c.command_id for c in many}) == 3


async def test_marks_reach_memory_commands_keyed_by_user() -> None:
    producer = FakeProducer()
    marks = AccessMarks(lambda: producer)
    marks.mark("t", "u", IDS, AT)
    marks.mark("t", "u", [], AT)  # an empty recall marks nothing
    for _ in range(100):
        if producer.sent:
            break
        await asyncio.sleep(0.01)
    await marks.close()
    ((topic, key, value),) = producer.sent
    assert (topic, key) == ("memory.commands", b"t:u")
    assert orjson.loads(value)["memory_ids"] == IDS
    assert producer.stopped


async def test_with_kafka_down_marking_returns_at_once_and_overflow_is_dropped_and_counted() -> None:
    marks = AccessMarks(lambda: FakeProducer(hang=True), max_pending=5, connect_timeout=0.05, retry_delay=0.05)
    before = dropped()
    started = time.perf_counter()
    for _ in range(20):
        marks.mark("t", "u", IDS, AT)
    assert time.perf_counter() - started < 0.5
    await asyncio.sleep(0.2)  # a few connection attempts time out
    assert marks.pending <= 5
    assert dropped() - before >= 14  # 20 marks, at most 5 queued and 1 held by the sender
    await marks.close()


async def test_a_broker_that_comes_back_gets_what_was_queued() -> None:
    working = FakeProducer()
    producers = [FakeProducer(up=False), FakeProducer(up=False), working]
    marks = AccessMarks(lambda: producers.pop(0), connect_timeout=0.05, retry_delay=0.01)
    marks.mark("t", "u", IDS, AT)
    marks.mark("t", "u", IDS[:1], AT)
    for _ in range(200):
        if len(working.sent) == 2:
            break
        await asyncio.sleep(0.01)
    await marks.close()
    assert [orjson.loads(v)["memory_ids"] for _, _, v in working.sent] == [IDS, IDS[:1]]
