"""Delivery to a stage handler: outages are waited out, poison goes to the DLQ, nothing vanishes."""

from dataclasses import dataclass, field
from typing import Any

from agents.dlq import REASON_HEADER
from agents.stage import deliver
from services.errors import StoreError


@dataclass
class Message:
    topic: str = "memory.changes"
    partition: int = 0
    offset: int = 0


@dataclass
class Event:
    value: bytes
    key: bytes = b"t:u"
    message: Message = field(default_factory=Message)


@dataclass
class Dlq:
    """Collects what would be produced to memory.dlq."""

    sent: list[dict[str, Any]] = field(default_factory=list)

    async def send(self, *, key: bytes, value: bytes, headers: dict[str, bytes]) -> None:
        self.sent.append({"key": key, "value": value, "headers": headers})


def items(*values: str) -> list[tuple[Event, str]]:
    return [(Event(v.encode(), message=Message(offset=i)), v) for i, v in enumerate(values)]


async def test_a_poison_item_goes_to_the_dlq_and_the_rest_are_handled() -> None:
    handled: list[str] = []

    async def handle(batch: list[str]) -> None:
        if "bad" in batch:
            raise ValueError("cannot index this")
        handled.extend(batch)

    dlq = Dlq()
    await deliver(items("a", "bad", "c"), handle, dlq, "qdrant_sink")
    assert handled == ["a", "c"]
    assert [m["value"] for m in dlq.sent] == [b"bad"]
    headers = dlq.sent[0]["headers"]
    assert headers[REASON_HEADER] == b"processing_error"
    assert b"cannot index this" in headers["x-memstream-error"]
    assert headers["x-memstream-source-offset"] == b"1"


async def test_a_store_outage_is_retried_until_it_passes_and_nothing_goes_to_the_dlq() -> None:
    calls: list[list[str]] = []

    async def handle(batch: list[str]) -> None:
        calls.append(batch)
        if len(calls) < 3:
            raise StoreError("postgres is restarting")

    dlq = Dlq()
    await deliver(items("a", "b"), handle, dlq, "consolidator", first_delay=0.01)
    assert calls == [["a", "b"]] * 3
    assert dlq.sent == []


async def test_a_clean_batch_is_handled_once() -> None:
    calls: list[list[str]] = []

    async def handle(batch: list[str]) -> None:
        calls.append(batch)

    await deliver(items("a", "b"), handle, Dlq(), "embedder")
    assert calls == [["a", "b"]]
