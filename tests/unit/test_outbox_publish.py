"""The outbox's one publisher (agents.outbox.publish): routing by topic name, one send per row, delete after the acks."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest

from agents.outbox import publish
from services.core import metrics
from services.stores.postgres import Outbox, OutboxMessage


class Rows(Outbox):
    """An outbox that records what it was asked to delete (no Postgres)."""

    def __init__(self, log: list[str]) -> None:
        self.log = log
        self.deleted: list[str] = []

    async def delete(self, ids: Sequence[str]) -> None:
        self.log.append("delete")
        self.deleted += ids


class Handle:
    """A topic handle: records each send; its acknowledgement settles later, or fails."""

    def __init__(self, name: str, log: list[str], fail: bool = False) -> None:
        self.name, self.log, self.fail = name, log, fail

    async def send(self, *, key: bytes, value: bytes) -> asyncio.Future[None]:
        self.log.append(f"{self.name}:{value.decode()}")
        ack: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self.fail:
            ack.set_exception(RuntimeError("not acknowledged"))
        else:
            ack.set_result(None)
        return ack


def row(n: int, topic: str) -> OutboxMessage:
    return OutboxMessage(id=f"r{n}", scope="t:u", topic=topic, key=b"t:u", value=str(n).encode())


def sent_count(stage: str, topic: str) -> float:
    value: float = metrics.EVENTS_OUT.labels(stage=stage, topic=topic)._value.get()
    return value


async def test_each_row_goes_once_in_order_to_its_topic_and_is_deleted_after_the_acks() -> None:
    log: list[str] = []
    rows = Rows(log)
    handles: dict[str, Any] = {"a": Handle("a", log), "b": Handle("b", log)}
    before = sent_count("test-publish", "a")
    messages = [row(1, "a"), row(2, "b"), row(1, "a"), row(3, "a")]  # r1 listed twice: a scope's leftovers

    await publish(rows, handles, "test-publish", messages, on_sent=lambda: log.append("sent"))

    assert log == ["a:1", "b:2", "a:3", "sent", "delete"]
    assert rows.deleted == ["r1", "r2", "r3"]
    assert sent_count("test-publish", "a") - before == 2


async def test_an_unacknowledged_send_raises_after_every_send_and_leaves_the_rows() -> None:
    log: list[str] = []
    rows = Rows(log)
    handles: dict[str, Any] = {"a": Handle("a", log, fail=True), "b": Handle("b", log)}

    with pytest.raises(RuntimeError, match="not acknowledged"):
        await publish(rows, handles, "test-publish", [row(1, "a"), row(2, "b")], on_sent=lambda: log.append("sent"))

    assert log == ["a:1", "b:2"]  # both sent, no hook, nothing deleted: the relay sends them again
    assert rows.deleted == []


async def test_nothing_to_send_touches_nothing() -> None:
    log: list[str] = []
    await publish(Rows(log), {}, "test-publish", [])
    assert log == []
