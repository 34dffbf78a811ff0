"""Reading a topic from its beginning to its end, with a fresh consumer.

The embedded broker (tansu) reports a wrong "latest" offset: ListOffsets
answers with the first offset of the newest batch plus one (148 where a
partition holds 286 messages, measured), so `end_offsets` cannot say where
a topic ends. What it gets right is the high watermark in every fetch
response, which the consumer keeps per partition (`highwater`). So a
partition is at its end when the consumer's position has reached the high
watermark of the latest fetch; the read ends when every partition is, and
nothing arrived for `settle` seconds (the watermark moves while producers
write). A broker that never reports a watermark for a partition (none has
been fetched yet) is covered by `idle`: no message at all for that long
ends the read too, and the reader says which way it ended.

No consumer group: partitions are assigned by hand and nothing is
committed, so a rebuild never disturbs the groups of the running stages.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from services.core.config import Settings
from services.core.kafka_auth import aiokafka_kwargs


@dataclass(frozen=True)
class Position:
    """One partition as the reader sees it: the next offset to read and the last fetched high watermark."""

    next_offset: int
    highwater: int | None


@dataclass
class EndDetector:
    """Pure end-of-log logic: fed positions and arrivals, it says when the read is done and why."""

    settle: float = 1.0
    idle: float = 10.0
    clock: Callable[[], float] = time.monotonic
    last_message: float = field(init=False)
    reason: str = field(default="", init=False)

    def __post_init__(self) -> None:
        self.last_message = self.clock()

    def arrived(self) -> None:
        self.last_message = self.clock()

    @staticmethod
    def caught_up(positions: Mapping[Any, Position]) -> bool:
        """Every partition has a watermark and the position reached it (vacuously false with no partitions)."""
        return bool(positions) and all(
            p.highwater is not None and p.next_offset >= p.highwater for p in positions.values()
        )

    def done(self, positions: Mapping[Any, Position]) -> bool:
        quiet = self.clock() - self.last_message
        if self.caught_up(positions) and quiet >= self.settle:
            self.reason = "high watermark reached"
            return True
        if quiet >= self.idle:
            self.reason = f"no message for {self.idle:g}s"
            return True
        return False


@dataclass(frozen=True)
class Message:
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None


async def read_to_end(
    settings: Settings,
    topic: str,
    *,
    settle: float = 1.0,
    idle: float = 10.0,
    batch: int = 500,
    fetch_max_wait_ms: int | None = None,
    on_total: Callable[[int], None] | None = None,
    detector: EndDetector | None = None,
) -> AsyncIterator[list[Message]]:
    """Batches of messages of every partition, from the earliest offset to the end (see the module doc).

    Order is kept within a partition, which is the order that matters: every
    topic is keyed by tenant:user. `on_total` is told the number of messages
    the read will have covered, whenever the watermarks say it grew.
    """
    from aiokafka import AIOKafkaConsumer, TopicPartition

    consumer = AIOKafkaConsumer(
        bootstrap_servers=settings.kafka_bootstrap,
        group_id=None,
        enable_auto_commit=False,
        fetch_max_wait_ms=fetch_max_wait_ms or max(settings.fetch_max_wait_ms, 100),
        max_partition_fetch_bytes=4 * 1024 * 1024,
        **aiokafka_kwargs(settings),
    )
    end = detector or EndDetector(settle=settle, idle=idle)
    try:  # started inside: a start cut short still stops it
        await consumer.start()
        await consumer.topics()  # fetches the cluster's metadata, partitions included
        partitions = consumer.partitions_for_topic(topic)
        if not partitions:
            raise LookupError(f"topic {topic} does not exist on {settings.kafka_bootstrap}")
        tps = [TopicPartition(topic, p) for p in sorted(partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        first = {tp: await consumer.position(tp) for tp in tps}
        known_total = -1
        while True:
            fetched = await consumer.getmany(timeout_ms=200, max_records=batch)
            out = [
                Message(tp.partition, m.offset, m.key, m.value)
                for tp, messages in sorted(fetched.items(), key=lambda kv: kv[0].partition)
                for m in messages
            ]
            positions = {tp: Position(await consumer.position(tp), consumer.highwater(tp)) for tp in tps}
            total = covered(first, positions)
            if on_total is not None and total is not None and total > known_total:
                known_total = total
                on_total(total)
            if out:
                end.arrived()
                yield out
            elif end.done(positions):
                return
    finally:
        await consumer.stop()


def covered(first: Mapping[Any, int], positions: Mapping[Any, Position]) -> int | None:
    """Messages from the first offsets to the watermarks: the read's total, once every watermark is known."""
    if any(p.highwater is None for p in positions.values()):
        return None
    return sum(max(0, (p.highwater or 0) - first[tp]) for tp, p in positions.items())


async def group_lag(settings: Settings, group: str, topic: str, within: float = 5.0) -> int | None:
    """Messages of `topic` that consumer group `group` has not committed yet; None if a watermark never came.

    Read as the embedded broker allows (see the module doc): the group's
    committed offsets through OffsetFetch (a consumer that assigns partitions
    by hand never joins the group), the ends from fetch responses. A
    partition the group never committed counts from its first offset.
    """
    from aiokafka import AIOKafkaConsumer, TopicPartition

    consumer = AIOKafkaConsumer(
        bootstrap_servers=settings.kafka_bootstrap,
        group_id=group,
        enable_auto_commit=False,
        fetch_max_wait_ms=100,
        max_partition_fetch_bytes=1024,
        **aiokafka_kwargs(settings),
    )
    try:  # started inside: a start cut short (a silent broker, a cancelled request) still stops it
        await consumer.start()
        await consumer.topics()
        tps = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
        if not tps:
            return None
        consumer.assign(tps)
        committed = {tp: await consumer.committed(tp) for tp in tps}
        await consumer.seek_to_beginning(*tps)
        first = {tp: await consumer.position(tp) for tp in tps}
        deadline = time.monotonic() + within
        while any(consumer.highwater(tp) is None for tp in tps):
            if time.monotonic() > deadline:
                return None
            await consumer.getmany(timeout_ms=100, max_records=1)
        ends: dict[Any, int] = {tp: consumer.highwater(tp) for tp in tps}
        lag: int = sum(max(0, ends[tp] - (committed[tp] or first[tp])) for tp in tps)
        return lag
    finally:
        await consumer.stop()
