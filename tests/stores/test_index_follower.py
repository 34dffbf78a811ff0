"""The read service's index follower fails as the index stage does, through a real broker and Postgres.

A generation's `memory.changes.g-<name>` holds a good change, one the index
refuses (a vector of the wrong dimension) and a value that is no change at
all. The good one is indexed; the other two land in `memory.dlq` with their
reasons, stage and source offsets, counted in the same metric as a stage's
dead letters; and the batch is committed, so nothing is retried forever or
dropped unseen.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from prometheus_client import REGISTRY

from ops.embedded.broker import broker_argv
from ops.embedded.supervision import Child, free_port, tcp_open, wait_until
from schemas import ChangeOp, MemoryChange
from services.api.index_follower import STAGE, follow_index
from services.archive.changes import seal_change
from services.core import generations
from services.core.config import Settings
from services.core.stages import INDEX_STAGE, group_id
from services.runtime import Runtime
from tests.factories import memory_record
from tests.stack import produce_records, read_dlq

NOW = datetime(2026, 5, 1, tzinfo=UTC)


@pytest.fixture(scope="module")
def bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = free_port()
    address = f"127.0.0.1:{port}"
    broker = Child("broker", broker_argv(address), Path(tmp_path_factory.mktemp("broker")))
    broker.start()
    try:
        wait_until(lambda: tcp_open("127.0.0.1", port), 30, "tansu")
        yield address
    finally:
        broker.stop()


@pytest.fixture
async def runtime(pg_dsn: str, tmp_path: Path, bootstrap: str) -> AsyncIterator[Runtime]:
    rt = Runtime.create(Settings(data_dir=tmp_path, pg_dsn=pg_dsn, kafka_bootstrap=bootstrap, qdrant_url=None))
    await rt.start(with_index=False)
    await rt.index.ensure(4)
    yield rt
    await rt.stop()


def change(text: str, vector: list[float]) -> MemoryChange:
    record = memory_record(text, at=NOW)
    return MemoryChange(
        tenant_id="t", user_id="u", op=ChangeOp.ADDED, record=record, vector=vector, cause=["e"], committed_at=NOW
    )


def dead_lettered(reason: str) -> float:
    return REGISTRY.get_sample_value("memstream_dlq_messages_total", {"stage": STAGE, "reason": reason}) or 0


async def committed(scoped: Settings, topic: str) -> int | None:
    consumer = AIOKafkaConsumer(bootstrap_servers=scoped.kafka_bootstrap, group_id=group_id(scoped.app_id, INDEX_STAGE))
    await consumer.start()
    try:
        offset: int | None = await consumer.committed(TopicPartition(topic, 0))
        return offset
    finally:
        await consumer.stop()


async def test_a_change_the_index_refuses_lands_in_the_dlq_with_its_reason_and_the_batch_is_committed(
    runtime: Runtime, bootstrap: str
) -> None:
    scoped = generations.scoped(runtime.settings, "v2")
    topic = generations.of(scoped).topic("changes")
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, 1, 1), NewTopic("memory.dlq", 1, 1)])
    finally:
        await admin.close()
    key = await runtime.keys.get_or_create("t", "u")
    good, refused = change("green tea in the morning", [1.0, 0.0, 0.0, 0.0]), change("wrong dimension", [1.0, 0.0])
    sent = await produce_records(
        bootstrap,
        [(b"t:u", seal_change(key, refused)), (b"t:u", b"{broken"), (b"t:u", seal_change(key, good))],
        topic=topic,
    )
    before = {reason: dead_lettered(reason) for reason in ("store_rejected", "schema_violation")}

    follower = asyncio.create_task(follow_index(runtime, scoped, max_delay=0.5))
    try:
        entries = await read_dlq(bootstrap, at_least=2)
        for _ in range(300):
            if await committed(scoped, topic) == 3:
                break
            await asyncio.sleep(0.1)
    finally:
        follower.cancel()
        with pytest.raises(asyncio.CancelledError):
            await follower

    by_source = {entry.source: entry for entry in entries}
    assert sorted(by_source) == sorted((topic, partition, offset) for partition, offset in sent[:2])
    assert by_source[(topic, *sent[0])].reason == "store_rejected"  # bad data, not an outage: not waited on
    assert by_source[(topic, *sent[1])].reason == "schema_violation"
    assert {entry.header("stage") for entry in entries} == {STAGE}
    assert b"wrong dimension" not in (by_source[(topic, *sent[0])].value or b"")  # sealed, as the stage's are
    assert {reason: dead_lettered(reason) - before[reason] for reason in before} == {
        "store_rejected": 1,
        "schema_violation": 1,
    }
    assert await runtime.index.count_scope("t", "u") == 1  # the good change of the same batch is indexed
    assert await committed(scoped, topic) == 3  # and the batch is committed: nothing waits on it, nothing is lost
