"""A read replica's own index, fed from its generation's `memory.changes`, and what it tells the other replicas.

Why: one read process is bound by its interpreter (the GIL is held most of
a recall, a third of it inside the Qdrant Edge binding), so reads scale by
process. Each process of `memstream serve --replicas N` (settings.replica)
keeps its own Edge shard under `data_dir/replicas/r<i>/` and is the only
member of its own consumer group, `<app_id>-index-replica-r<i>`: it takes
every partition by assignment (no group join to wait for) and applies each
batch with the index stage's code (services/stores/index_feed.py),
committing after the shard has it. A shard that did not exist when the
process started (a first start, or one removed to rebuild it) is filled
from the beginning of the log, whatever the group had committed.

Ready: the process opens its HTTP port only once its lag is 0 against end
offsets read at that moment, so a connection the kernel hands it (all
replicas share the port with SO_REUSEPORT) never reads an index that is
still catching up.

Read-your-writes: each replica reports its positions to
`public.read_replicas` after every batch and every `REPORT_EVERY` seconds
(services/stores/postgres/replicas.py). `?wait=true` first sees the write in
the answering replica's own index, then waits until every other ready
replica has reported positions at least as far as this one's.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from services.api.index_follower import Follower, changes_consumer, dlq_producer
from services.core import generations, metrics
from services.core.config import Settings
from services.core.errors import StoreError
from services.core.stages import INDEX_STAGE, group_id
from services.runtime import Runtime
from services.stores.postgres import replicas as positions_table
from services.stores.postgres.pool import Conn

log = logging.getLogger(__name__)

STAGE = "index_replica"
# Seconds between reports while nothing arrives (a report also follows every applied batch).
REPORT_EVERY = 2.0
# Seconds between reads of the log's end offsets, for the lag.
ENDS_EVERY = 1.0
_FIRST_POLL = 0.02
_MAX_POLL = 0.2


def replica_group(scoped: Settings, name: str) -> str:
    return group_id(scoped.app_id, f"{INDEX_STAGE}-replica-{name}")


@dataclass
class ReplicaState:
    """How far one replica's index is in one generation's log; read by /readyz, /metrics and `?wait=true`."""

    name: str
    generation: str
    positions: dict[int, int] = field(default_factory=dict)  # partition -> next offset, applied and committed
    applying: dict[int, int] = field(default_factory=dict)  # partition -> next offset after the batch in hand
    ends: dict[int, int] = field(default_factory=dict)
    caught_up: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def lag(self) -> int:
        return sum(max(0, end - self.positions.get(p, 0)) for p, end in self.ends.items())

    def target(self) -> dict[int, int]:
        """Positions a peer must reach to hold all this replica's index may already show (a batch in hand too)."""
        return {p: max(o, self.applying.get(p, 0)) for p, o in self.positions.items()}


class ReplicaFeed:
    """Keeps one generation's index on this replica current (`rt` is that generation's view)."""

    def __init__(self, rt: Runtime, scoped: Settings, name: str, *, fresh: bool) -> None:
        self._rt = rt
        self._scoped = scoped
        self._fresh = fresh  # the shard was just created: read the log from its beginning
        self.state = ReplicaState(name, generations.of(scoped).name)
        self._reported = 0.0
        self._ends_read = 0.0
        self._peers = Peers(rt, scoped.replica_stale_seconds)

    async def run(self) -> None:
        """Until cancelled; a broker or store outage ends a consumer, another starts after a pause."""
        while True:
            try:
                await self._consume()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("%s %s: stopped (%s); starting again in 2s", STAGE, self.state.name, exc)
                await asyncio.sleep(2.0)

    async def _consume(self) -> None:
        from aiokafka import TopicPartition

        scoped, topic = self._scoped, generations.of(self._scoped).topic("changes")
        consumer = changes_consumer(scoped, replica_group(scoped, self.state.name), f"{STAGE}-{self.state.name}")
        producer = dlq_producer(scoped)
        try:
            await consumer.start()
            await producer.start()
            await consumer.topics()
            partitions = consumer.partitions_for_topic(topic)
            if not partitions:
                raise StoreError(f"topic {topic} does not exist yet")
            tps = [TopicPartition(topic, p) for p in sorted(partitions)]
            consumer.assign(tps)
            if self._fresh:
                await consumer.seek_to_beginning(*tps)
            follower = Follower(self._rt, producer, generations.of(scoped).topic("dlq"), scoped.max_message_bytes, 30.0)
            self.state.positions = {tp.partition: await consumer.position(tp) for tp in tps}
            log.info("%s %s follows %s from %s", STAGE, self.state.name, topic, self.state.positions)
            while True:
                fetched = await consumer.getmany(timeout_ms=200, max_records=scoped.consolidate_batch_size)
                records: list[Any] = [r for batch in fetched.values() for r in batch]
                if records:
                    self.state.applying = _after(records)
                    await follower.index(records)
                    await consumer.commit()
                    self._fresh = False
                    self.state.positions.update(self.state.applying)
                    metrics.EVENTS_IN.labels(stage=STAGE).inc(len(records))
                if time.monotonic() - self._ends_read >= ENDS_EVERY or not self.state.caught_up.is_set():
                    self.state.ends = {tp.partition: end for tp, end in (await consumer.end_offsets(tps)).items()}
                    self._ends_read = time.monotonic()
                if not self.state.caught_up.is_set() and self.state.lag == 0:
                    log.info("%s %s caught up at %s", STAGE, self.state.name, self.state.positions)
                    self.state.caught_up.set()
                if records or time.monotonic() - self._reported >= REPORT_EVERY:
                    await self._report()
        finally:
            await producer.stop()
            await consumer.stop()

    async def _report(self) -> None:
        """This replica's position and lag into the shared table; an outage skips a report, never the feed."""
        state = self.state
        metrics.REPLICA_LAG.labels(replica=state.name, generation=state.generation).set(state.lag)
        if not state.caught_up.is_set():
            self._reported = time.monotonic()
            return  # not serving: nobody waits for it
        try:
            async with self._peers.table("replica position") as conn:
                await positions_table.report(conn, state.name, state.generation, state.positions, state.lag)
        except StoreError as exc:
            log.info("%s %s: position not reported this time (%s)", STAGE, state.name, exc)
        self._reported = time.monotonic()


def _after(records: list[Any]) -> dict[int, int]:
    """Per partition, the offset after the last record of the batch."""
    out: dict[int, int] = {}
    for record in records:
        out[record.partition] = max(out.get(record.partition, 0), record.offset + 1)
    return out


class Peers:
    """The other replicas of the same generation, as they report themselves."""

    def __init__(self, rt: Runtime, stale_seconds: float) -> None:
        self._rt = rt
        self._stale = stale_seconds
        self._table_ready = False

    @contextlib.asynccontextmanager
    async def table(self, operation: str) -> AsyncIterator[Conn]:
        """A connection to use `public.read_replicas` on, the table created by the first use."""
        async with self._rt.pg.connection(operation) as conn:
            if not self._table_ready:
                await positions_table.ensure_table(conn)
                self._table_ready = True
            yield conn

    async def listing(self, generation: str) -> list[positions_table.Position]:
        async with self.table("replica positions") as conn:
            return await positions_table.listing(conn, generation)

    async def leave(self, name: str) -> None:
        """Best effort: a replica stopping while Postgres is down stays listed, and goes stale."""
        try:
            async with self._rt.pg.connection("replica leaves") as conn:
                await positions_table.forget(conn, name)
        except StoreError as exc:
            log.info("replica %s still listed in read_replicas: %s", name, exc)

    async def export(self, generation: str) -> list[positions_table.Position]:
        """Every replica's lag as a metric (whichever replica is scraped) and for /readyz."""
        rows = await self.listing(generation)
        for row in rows:
            metrics.REPLICA_LAG.labels(replica=row.name, generation=generation).set(row.lag)
            metrics.REPLICA_REPORT_AGE.labels(replica=row.name).set(row.age_seconds)
        return rows

    async def wait_reached(self, own: ReplicaState, seconds: float) -> bool:
        """True once every live peer is at or past `own`'s positions (taken now), False after `seconds`."""
        target = own.target()
        deadline = time.monotonic() + seconds
        delay = _FIRST_POLL
        while True:
            rows = await self.listing(own.generation)
            behind = [
                r.name
                for r in rows
                if r.name != own.name
                and r.age_seconds < self._stale
                and not positions_table.reached(r.positions, target)
            ]
            if not behind:
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                log.info("replicas %s had not reached %s in %.1fs", behind, target, seconds)
                return False
            await asyncio.sleep(min(delay, left))
            delay = min(delay * 2, _MAX_POLL)
