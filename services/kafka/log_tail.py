"""Following a topic as a subscriber does, with a consumer of its own: from its beginning or from its end, forever.

No consumer group: partitions are assigned by hand and nothing is committed,
so a follower never disturbs the stages' groups and any number can run.
(Reading from the beginning to the end and stopping is services/kafka/log_end.py.)

"From its end" on the embedded broker: tansu's ListOffsets "latest" answers
the first offset of a recent batch plus one, short of the end (docs/operations/embedded-broker.md, the
embedded broker), while the high watermark in its fetch responses is exact.
So `pin_to_log_end` seeks to that early end, fetches until every partition
has reported its high watermark (what it fetched meanwhile predates the pin),
then seeks there.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

from services.core.config import Settings
from services.core.kafka_auth import aiokafka_kwargs
from services.kafka.log_end import Message


async def pin_to_log_end(consumer: Any, within: float = 30.0) -> None:
    """Position every assigned partition of an aiokafka consumer at its log end, as a fetch response reports it."""
    await consumer.seek_to_end()
    partitions = consumer.assignment()
    deadline = time.monotonic() + within
    while any(consumer.highwater(tp) is None for tp in partitions):
        if time.monotonic() > deadline:
            raise TimeoutError(f"no fetch response for {partitions} within {within}s")
        await consumer.getmany(timeout_ms=100)
    for tp in partitions:
        consumer.seek(tp, consumer.highwater(tp))


async def follow_topic(
    settings: Settings, topic: str, *, from_beginning: bool, batch: int = 500
) -> AsyncIterator[list[Message]]:
    """Batches of `topic`'s messages as they come, per partition in log order; never ends by itself."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    consumer = AIOKafkaConsumer(
        bootstrap_servers=settings.kafka_bootstrap,
        group_id=None,
        enable_auto_commit=False,
        fetch_max_wait_ms=max(settings.fetch_max_wait_ms, 100),
        **aiokafka_kwargs(settings),
    )
    try:  # started inside: a start cut short (a silent broker, a cancelled request) still stops it
        await consumer.start()
        await consumer.topics()  # the cluster's metadata, partitions included
        partitions = consumer.partitions_for_topic(topic)
        if not partitions:
            raise LookupError(f"topic {topic} does not exist on {settings.kafka_bootstrap}")
        consumer.assign([TopicPartition(topic, p) for p in sorted(partitions)])
        if from_beginning:
            await consumer.seek_to_beginning()
        else:
            await pin_to_log_end(consumer)
        while True:
            fetched = await consumer.getmany(timeout_ms=1000, max_records=batch)
            out = [
                Message(tp.partition, m.offset, m.key, m.value)
                for tp, messages in sorted(fetched.items(), key=lambda kv: kv[0].partition)
                for m in messages
            ]
            if out:
                yield out
    finally:
        await consumer.stop()
