"""Access marks leave recall coalesced, without ever failing or slowing it: a fake producer stands in for Kafka.

One mark per memory per window: N recalls of a memory within a window are
one entry of one command, carrying N and the latest access.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson

from schemas.commands import AccessCommand
from services.api.access import AccessMarks, Seen, access_commands
from services.core.backlog import READ_SIDE
from services.core.metrics import ACCESS_MARKS
from services.core.textutil import stable_id

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

    async def send(self, topic: str, value: bytes, key: bytes, headers: Sequence[tuple[str, bytes]]) -> Any:
        assert list(headers) == [READ_SIDE]  # a burst of marks never reads as ingest behind (services/core/backlog.py)
        self.sent.append((topic, key, value))
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done

    def commands(self) -> list[AccessCommand]:
        return [AccessCommand.model_validate_json(value) for _, _, value in self.sent]


def dropped() -> float:
    return float(ACCESS_MARKS.labels(outcome="dropped")._value.get())


async def until(check: Any, seconds: float = 2.0) -> None:
    for _ in range(int(seconds / 0.01)):
        if check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("never happened")


def test_a_window_is_one_command_per_user_with_one_mark_per_memory() -> None:
    seen = {IDS[0]: Seen(3, AT + timedelta(seconds=2)), IDS[1]: Seen(1, AT)}
    (cmd,) = access_commands("t", "u", seen, "w1")
    assert cmd.memory_ids == IDS[:2]
    assert cmd.counts == [3, 1]
    assert cmd.last_accessed == [AT + timedelta(seconds=2), AT]
    assert cmd.at == AT + timedelta(seconds=2)
    assert cmd.key == b"t:u"
    assert cmd.marks() == [(IDS[0], 3, AT + timedelta(seconds=2)), (IDS[1], 1, AT)]
    assert access_commands("t", "u", seen, "w1")[0].command_id == cmd.command_id  # a resend is applied once
    assert access_commands("t", "u", seen, "w2")[0].command_id != cmd.command_id
    assert access_commands("t", "u2", seen, "w1")[0].command_id != cmd.command_id
    many = access_commands("t", "u", {stable_id("m", str(i)): Seen(1, AT) for i in range(250)}, "w1")
    assert [len(c.memory_ids) for c in many] == [100, 100, 50]
    assert len({c.command_id for c in many}) == 3


async def test_n_recalls_of_one_memory_within_a_window_are_one_mark_counting_n() -> None:
    producer = FakeProducer()
    marks = AccessMarks(lambda: producer, flush_seconds=0.2)
    for n in range(25):
        marks.mark("t", "u", [IDS[0], IDS[1]] if n == 3 else [IDS[0]], AT + timedelta(seconds=n))
    marks.mark("t", "v", [IDS[0]], AT)  # another user's recall: their own mark
    marks.mark("t", "u", [], AT)  # an empty recall marks nothing
    assert (marks.pending, marks.recorded) == (3, 27)
    assert producer.sent == []  # nothing before the window closes
    await until(lambda: producer.sent)
    await marks.close()

    assert [(topic, key) for topic, key, _ in producer.sent] == [
        ("memory.commands", b"t:u"),
        ("memory.commands", b"t:v"),
    ]
    mine, theirs = producer.commands()
    assert mine.marks() == [(IDS[0], 25, AT + timedelta(seconds=24)), (IDS[1], 1, AT + timedelta(seconds=3))]
    assert theirs.marks() == [(IDS[0], 1, AT)]
    assert orjson.loads(producer.sent[0][2])["kind"] == "access"
    assert marks.pending == 0
    assert producer.stopped


async def test_the_next_window_is_a_new_mark() -> None:
    producer = FakeProducer()
    marks = AccessMarks(lambda: producer, flush_seconds=0.05)
    marks.mark("t", "u", IDS[:1], AT)
    await until(lambda: len(producer.sent) == 1)
    marks.mark("t", "u", IDS[:1], AT + timedelta(seconds=1))
    marks.mark("t", "u", IDS[:1], AT + timedelta(seconds=2))
    await until(lambda: len(producer.sent) == 2)
    await asyncio.sleep(0)
    await marks.close()
    first, second = producer.commands()
    assert (first.marks(), second.marks()) == ([(IDS[0], 1, AT)], [(IDS[0], 2, AT + timedelta(seconds=2))])
    assert first.command_id != second.command_id


async def test_close_sends_what_the_window_holds_to_a_connected_broker() -> None:
    producer = FakeProducer()
    marks = AccessMarks(lambda: producer, flush_seconds=0.05)
    marks.mark("t", "u", IDS[:1], AT)
    await until(lambda: producer.sent)
    marks._flush_seconds = 3600  # the next window would close long after the test
    marks.mark("t", "u", IDS[1:], AT)
    await marks.close()
    assert [c.memory_ids for c in producer.commands()] == [IDS[:1], IDS[1:]]


async def test_with_kafka_down_marking_returns_at_once_and_new_memories_beyond_the_bound_are_dropped() -> None:
    marks = AccessMarks(
        lambda: FakeProducer(hang=True), flush_seconds=0.01, max_pending=5, connect_timeout=0.05, retry_delay=0.05
    )
    before = dropped()
    started = time.perf_counter()
    for n in range(20):
        marks.mark("t", "u", [stable_id("m", str(n))], AT)
    for _ in range(1000):
        marks.mark("t", "u", [stable_id("m", "0")], AT)  # a held memory only counts up: no new mark
    assert time.perf_counter() - started < 0.5
    await asyncio.sleep(0.2)  # a few connection attempts time out
    assert marks.pending == 5
    assert dropped() - before == 15
    await marks.close()
    assert dropped() - before == 20  # nothing connected at shutdown: the held marks are dropped, counted


async def test_a_broker_that_comes_back_gets_the_windows_it_missed_added_up() -> None:
    working = FakeProducer()
    producers = [FakeProducer(up=False), FakeProducer(up=False), working]
    marks = AccessMarks(lambda: producers.pop(0), flush_seconds=0.01, connect_timeout=0.05, retry_delay=0.01)
    marks.mark("t", "u", IDS, AT)
    await asyncio.sleep(0.015)
    marks.mark("t", "u", IDS[:1], AT + timedelta(seconds=1))
    await until(lambda: working.sent)
    await marks.close()
    marks_sent = [m for c in working.commands() for m in c.marks()]
    assert marks_sent == [(IDS[0], 2, AT + timedelta(seconds=1)), (IDS[1], 1, AT), (IDS[2], 1, AT)]
