"""The serving generation's Qdrant Edge shard, kept current by the read service itself.

A shard has one owner. While a generation other than the default serves, the
read service holds its shard (services/api/serving.py), so no worker can run
that generation's index stage: the read service does, here. It consumes the
generation's `memory.changes.g-<name>` with that generation's index consumer
group, so it starts where the rebuild's worker stopped, and applies each
batch with the index stage's own code (services/stores/index_feed.py),
committing only after the shard has it: a restart re-applies at most one
batch, which the index absorbs (upserts and deletes are idempotent).

Failures are handled as in every stage (services/kafka/dead_letters.py): an
outage of the shard, the key store or the broker is waited out with capped
backoff, nothing committed meanwhile; a value that is no change, or a change
the index refuses on its own, goes to `memory.dlq` with its reason (sealed
for its user, counted in `memstream_dlq_messages_total{stage="index_follower"}`),
and the batch is committed once the DLQ holds it. Nothing is dropped
unseen; `memstream rebuild index` re-creates the shard from Postgres.

With a Qdrant server there is no follower: the generation's worker runs its
own index stage against the server's collection.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from schemas.changes import SealedChangeMessage
from services.archive.changes import open_messages
from services.core import backlog, generations, metrics
from services.core.config import Settings
from services.core.errors import StoreUnavailable
from services.core.kafka_auth import aiokafka_kwargs
from services.core.stages import INDEX_STAGE, group_id
from services.kafka.dead_letters import (
    dead_lettered,
    deliver,
    entry,
    parse_or_dead_letter,
    source_headers,
    value_limit,
)
from services.runtime import Runtime
from services.stores.index_feed import apply_changes, count_skipped

log = logging.getLogger(__name__)
STAGE = "index_follower"


def follows(settings: Settings) -> bool:
    """Whether the read service must feed a generation's index: only an embedded shard needs it."""
    return settings.qdrant_url is None


async def follow_index(rt: Runtime, scoped: Settings, *, max_delay: float = 30.0) -> None:
    """Apply the generation's changes to `rt.index` until cancelled (`rt` is the generation's view).

    A broker outage ends a consumer; another starts after a pause, from the group's committed offsets.
    """
    while True:
        try:
            await _follow(rt, scoped, max_delay)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("%s: stopped (%s); starting again in 5s", STAGE, exc)
            await asyncio.sleep(5.0)


async def _follow(rt: Runtime, scoped: Settings, max_delay: float) -> None:
    gen = generations.of(scoped)
    consumer = changes_consumer(scoped, group_id(scoped.app_id, INDEX_STAGE), f"{STAGE}-{gen.name}")
    consumer.subscribe([gen.topic("changes")])
    producer = dlq_producer(scoped)
    # Both are stopped whatever happens, a failed start() included: aiokafka keeps a started
    # client's connections open until stop(), and a client that never started still holds its loop.
    try:
        await consumer.start()
        await producer.start()
        follower = Follower(rt, producer, gen.topic("dlq"), scoped.max_message_bytes, max_delay)
        log.info("read service feeds generation %s's index from %s", gen.name, gen.topic("changes"))
        while True:
            fetched = await consumer.getmany(timeout_ms=1000, max_records=scoped.consolidate_batch_size)
            records: Sequence[Any] = [r for batch in fetched.values() for r in batch]
            if not records:
                continue
            await follower.index(records)
            await consumer.commit()
            metrics.EVENTS_IN.labels(stage=STAGE).inc(len(records))
    finally:
        await producer.stop()
        await consumer.stop()


def changes_consumer(scoped: Settings, group: str, name: str) -> Any:
    """A consumer of a generation's changes that commits by hand, after the index has each batch."""
    from aiokafka import AIOKafkaConsumer

    return AIOKafkaConsumer(
        bootstrap_servers=scoped.kafka_bootstrap,
        group_id=group,
        client_id=f"memstream-{name}",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        fetch_max_wait_ms=scoped.fetch_max_wait_ms,
        **aiokafka_kwargs(scoped),
    )


def dlq_producer(scoped: Settings) -> Any:
    """memory.dlq's producer, as the stages': every broker replica acknowledges a dead letter before the commit."""
    from aiokafka import AIOKafkaProducer

    return AIOKafkaProducer(
        bootstrap_servers=scoped.kafka_bootstrap,
        acks="all",
        max_request_size=scoped.max_message_bytes + 64 * 1024,
        **aiokafka_kwargs(scoped),
    )


class Follower:
    """One generation's batches into its index, failing as the index stage does; the caller commits after `index`."""

    def __init__(self, rt: Runtime, producer: Any, dlq_topic: str, max_message_bytes: int, max_delay: float) -> None:
        self._rt = rt
        self._producer = producer  # an AIOKafkaProducer, started
        self._dlq_topic = dlq_topic
        self._limit = value_limit(max_message_bytes)
        self._max_delay = max_delay

    async def index(self, records: Sequence[Any]) -> None:
        """Apply a batch of consumed records (aiokafka's); returns once every effect and dead letter is durable."""
        stamps = (r.timestamp / 1000 if r.timestamp is not None else None for r in records)
        backlog.STAGES.saw(STAGE, backlog.oldest_wait(stamps, time.time()))
        parsed = await parse_or_dead_letter(records, SealedChangeMessage, self._dead_letter)
        if parsed:
            await deliver(parsed, self._apply, stage=STAGE, outlast=self._outlast, dead_letter=self._dead_letter)

    async def _apply(self, messages: list[SealedChangeMessage]) -> None:
        changes, skipped = await open_messages(self._rt.keys, [message.root for message in messages])
        await apply_changes(self._rt, changes)
        count_skipped(STAGE, skipped)

    async def _dead_letter(self, record: Any, reason: str, error: str) -> None:
        """The record's entry in memory.dlq, sealed with its user's key, sent again after each outage until acked."""
        source = source_headers(record.topic, record.partition, record.offset)

        async def attempt() -> None:
            letter = await entry(
                self._rt.keys,
                record.key,
                record.value,
                source,
                stage=STAGE,
                reason=reason,
                error=error,
                limit=self._limit,
            )
            sent = await self._producer.send(
                self._dlq_topic, key=letter.key, value=letter.value, headers=list(letter.headers.items())
            )
            await sent

        await self._outlast(attempt, 1)
        dead_lettered(STAGE, reason, f"{record.partition}/{record.offset}", error)

    async def _outlast(self, attempt: Callable[[], Awaitable[None]], failed: int) -> None:
        """`attempt` again after each outage of a store or the broker, with capped backoff; anything else raises."""
        from aiokafka.errors import KafkaError

        delay = 0.5
        while True:
            try:
                return await attempt()
            except (StoreUnavailable, KafkaError) as exc:
                metrics.STAGE_ERRORS.labels(stage=STAGE).inc(failed)
                log.warning("%s: store or broker unavailable, retrying in %.1fs: %r", STAGE, delay, exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, self._max_delay)
