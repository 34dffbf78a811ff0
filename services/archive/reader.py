"""Replaying memory.archive: every event that can still be opened, in per-user order, forgotten users skipped.

Chat events only: the archive's command records (and `forgotten` markers)
are counted and left to the commands stage, which replays them itself
(agents/consolidator/archived.py).

`archived_events` reads the topic from its beginning with a consumer of its
own (no group, nothing committed, so any number of replays can run at once
and none disturbs the live stages), opens each record with its user's key and
yields the TurnEvent or SessionEvent inside. A record whose key is gone (the
user was forgotten, or forgotten and came back with a new key) is skipped and
counted; so is one that does not open (malformed or tampered with) — neither
is an error, and neither stops the replay.

Where the log ends. tansu reports as a partition's end offset the first
offset of its newest batch plus one, not the offset after its last record
(946 for 1,000 records). So the reader takes the end offsets reported when it
starts as a lower bound: it reads until every partition's position has
passed its bound (a fetch returns whole batches, so the newest batch has then
been fetched) and then until `archive_idle_seconds` go by with no record (the
rest of that batch, buffered or in flight). On Apache Kafka the bound is
exact and the idle poll finds nothing. A partition that stays short of its
bound with no record for `archive_stall_seconds` raises StoreUnavailable
rather than ending a replay early. With `follow=True` it never ends (it
tails the archive).

Repeats: the window stage's outbox may send a record twice (a crash between
the send and the outbox delete). The reader drops a repeat of an event id it
yielded within the last `dedup_window` events; any older repeat is harmless,
because the window stage, which a rebuild feeds, archives each event id once
(Postgres `turns` primary key) and ignores the second.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

from schemas import SessionEvent, TurnEvent
from services.archive.codec import EVENT_TYPES, ArchiveRecord, RecordRejected, open_record, read_record
from services.archive.keys import KeyStore
from services.core import topics
from services.core.config import Settings
from services.core.errors import StoreUnavailable
from services.core.kafka_auth import aiokafka_kwargs

log = logging.getLogger(__name__)


@dataclass
class ReplayStats:
    """What a replay saw; `total` is an estimate for progress bars (tansu under-reports ends, see above)."""

    total: int = 0
    read: int = 0
    yielded: int = 0
    forgotten: int = 0  # no key any more: the user was forgotten
    unreadable: int = 0  # not an archive record, or it does not open with its user's key
    duplicates: int = 0
    commands: int = 0  # command and forget records: the commands stage replays those, not the window


async def read_topic(
    settings: Settings,
    topic: str,
    *,
    stats: ReplayStats | None = None,
    follow: bool = False,
    max_records: int = 500,
) -> AsyncIterator[list[Any]]:
    """Batches of raw records (aiokafka ConsumerRecords) of `topic`, from the beginning to its end as found at the start."""
    stats = stats if stats is not None else ReplayStats()
    consumer = AIOKafkaConsumer(
        bootstrap_servers=settings.kafka_bootstrap,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        fetch_max_wait_ms=settings.fetch_max_wait_ms,
        client_id=f"memstream-replay-{topic}",
        **aiokafka_kwargs(settings),
    )
    try:  # started inside: a start cut short (a silent broker, a cancelled request) still stops it
        await consumer.start()
        await consumer.topics()  # fresh metadata
        partitions = consumer.partitions_for_topic(topic)
        if not partitions:
            raise StoreUnavailable(f"topic {topic} does not exist (memstream topics create makes it)")
        tps = [TopicPartition(topic, p) for p in sorted(partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        begins = await consumer.beginning_offsets(tps)
        ends = await consumer.end_offsets(tps)
        stats.total = sum(max(ends[tp] - begins[tp], 0) for tp in tps)
        quiet_since = time.monotonic()
        while True:
            fetched = await consumer.getmany(
                timeout_ms=int(settings.archive_idle_seconds * 1000), max_records=max_records
            )
            records = [r for tp in tps for r in fetched.get(tp, [])]
            if records:
                stats.read += len(records)
                stats.total = max(stats.total, stats.read)
                quiet_since = time.monotonic()
                yield records
                continue
            if follow:
                continue
            short = [tp.partition for tp in tps if await consumer.position(tp) < ends[tp]]
            if not short:
                return
            if time.monotonic() - quiet_since > settings.archive_stall_seconds:
                raise StoreUnavailable(f"{topic}: partitions {short} stalled short of their end offsets")
    finally:
        await consumer.stop()


async def archived_events(
    settings: Settings,
    keys: KeyStore,
    *,
    stats: ReplayStats | None = None,
    follow: bool = False,
    dedup_window: int = 100_000,
    topic: str = topics.ARCHIVE,
) -> AsyncIterator[TurnEvent | SessionEvent]:
    """Every archived event that can still be opened, in log order per user.

    Keys are looked up once per batch of records, so a user forgotten while
    the replay runs is skipped from the next batch on.
    """
    stats = stats if stats is not None else ReplayStats()
    recent: OrderedDict[tuple[str, str, str], None] = OrderedDict()
    async for batch in read_topic(settings, topic, stats=stats, follow=follow):
        for event in await _open_batch(keys, batch, stats):
            seen = (event.tenant_id, event.user_id, event.event_id)
            if seen in recent:
                stats.duplicates += 1
                continue
            recent[seen] = None
            if len(recent) > dedup_window:
                recent.popitem(last=False)
            stats.yielded += 1
            yield event


async def _open_batch(keys: KeyStore, batch: Sequence[Any], stats: ReplayStats) -> list[TurnEvent | SessionEvent]:
    records: list[ArchiveRecord] = []
    for message in batch:
        try:
            record = read_record(message.value)
        except RecordRejected as exc:
            stats.unreadable += 1
            log.warning("%s[%d]@%d skipped: %s", message.topic, message.partition, message.offset, exc)
            continue
        if record.type in EVENT_TYPES:
            records.append(record)
        else:
            stats.commands += 1
    current = await keys.current({r.owner for r in records})
    opened: list[TurnEvent | SessionEvent] = []
    for record in records:
        key = current.get(record.owner)
        if key is None or key.key_id != record.key_id:
            stats.forgotten += 1
            continue
        try:
            opened.append(open_record(record, key))
        except RecordRejected as exc:
            stats.unreadable += 1
            log.warning("archive record %s of %s skipped: %s", record.event_id, record.owner, exc)
    return opened
