"""Delivery to a stage handler: outages are waited out, poison goes to the DLQ, nothing vanishes."""

from dataclasses import dataclass, field
from typing import Any

from agents.dlq import DeadLetters
from agents.stage import deliver
from services.core.errors import InvalidEvent, StoreRejected, StoreUnavailable
from services.kafka.dead_letters import REASON_HEADER


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
class DlqTopic:
    """Collects what would be produced to memory.dlq."""

    sent: list[dict[str, Any]] = field(default_factory=list)

    async def send(self, *, key: bytes, value: bytes, headers: dict[str, bytes]) -> None:
        self.sent.append({"key": key, "value": value, "headers": headers})


class Dlq(DeadLetters):
    def __init__(self, max_message_bytes: int = 900 * 1024) -> None:
        super().__init__(DlqTopic(), max_message_bytes, None)

    @property
    def sent(self) -> list[dict[str, Any]]:
        topic: DlqTopic = self.topic
        return topic.sent


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
            raise StoreUnavailable("postgres is restarting")

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


async def test_bad_data_the_store_rejects_and_invalid_events_go_to_the_dlq_with_their_reason() -> None:
    async def handle(batch: list[str]) -> None:
        if "nul" in batch:
            raise StoreRejected("postgres: rejected [22021] invalid byte sequence")
        if "dup" in batch:
            raise InvalidEvent("conflicting_duplicate", "event e1 is known with different content")

    dlq = Dlq()
    await deliver(items("ok", "nul", "dup"), handle, dlq, "window")
    reasons = {m["value"]: m["headers"][REASON_HEADER] for m in dlq.sent}
    assert reasons == {b"nul": b"store_rejected", b"dup": b"conflicting_duplicate"}


async def test_a_dlq_copy_that_cannot_fit_is_truncated_with_size_and_digest() -> None:
    import hashlib

    dlq = Dlq(max_message_bytes=20_000)
    big = b"x" * 50_000
    await dlq.send(Event(big), stage="window", reason="oversized", error="too big")
    sent = dlq.sent[0]
    assert len(sent["value"]) < 20_000
    assert sent["value"] == big[: len(sent["value"])]
    assert sent["headers"]["x-memstream-original-size"] == b"50000"
    assert sent["headers"]["x-memstream-sha256"] == hashlib.sha256(big).hexdigest().encode()
    small = Dlq()
    await small.send(Event(b"{bad"), stage="window", reason="invalid_json", error="e")
    assert small.sent[0]["value"] == b"{bad"
    assert "x-memstream-truncated" not in small.sent[0]["headers"]
