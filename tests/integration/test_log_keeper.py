"""The embedded broker's log keeper against real tansu: compaction loses and duplicates nothing, retention forgets.

tansu and ops/s3store.py run as `memstream up` runs them, with the keeper's
clock shortened (rounds every 0.5 s, batches settle after 1 s). Producers
write one message per request, the shape that made partitions slow; the
records are then read from the beginning by aiokafka and confluent-kafka
(both check every batch's CRC) and by a consumer that followed the tail
while the keeper rewrote the log, and must be the same records at the same
offsets, once each.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka import TopicPartition as AioTopicPartition
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from ops.embedded.broker import broker_child
from ops.embedded.supervision import Child, wait_until
from ops.embedded.supervision import free_port as _free_port
from ops.embedded.supervision import tcp_open as _tcp_open
from services.core.config import Settings

FAST_KEEPER = ["--keeper-interval", "0.5", "--keeper-settle", "1", "--keeper-max-delay", "1", "--keeper-grace", "2"]
Seen = tuple[int, int, bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...]]


class KeptBroker:
    def __init__(self, root: Path, topics_file: Path | None = None) -> None:
        (root / "logs").mkdir(parents=True, exist_ok=True)
        self.root = root
        self.settings = Settings(data_dir=root, kafka_bootstrap=f"127.0.0.1:{_free_port()}")
        port = _free_port()
        argv = [sys.executable, "-m", "ops.s3store", str(root / "kafka"), "--port", str(port), "--bucket", "tansu"]
        argv += FAST_KEEPER + (["--topics-file", str(topics_file)] if topics_file else [])
        self.store = Child("kafka-store", argv, root / "logs")
        self.store.start()
        wait_until(lambda: _tcp_open("127.0.0.1", port), 30, "store")
        self.broker = broker_child(self.settings, root / "logs", s3_endpoint=f"http://127.0.0.1:{port}")
        self.broker.start()
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        wait_until(lambda: admin.list_topics(timeout=2) is not None, 30, "broker")

    @property
    def bootstrap(self) -> str:
        return self.settings.kafka_bootstrap

    def create(self, topic: str, partitions: int, config: dict[str, str] | None = None) -> None:
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        for future in admin.create_topics([NewTopic(topic, partitions, 1, config=config or {})]).values():
            future.result(30)

    def objects(self, topic: str, partition: int) -> list[str]:
        folder = next((self.root / "kafka" / "tansu" / "clusters").glob(f"*/topics/{topic}/partitions"))
        return sorted(os.listdir(folder / f"{partition:010d}" / "records"))

    def stop(self) -> None:
        self.broker.stop()
        self.store.stop()


@pytest.fixture
def kept(tmp_path: Path) -> Iterator[KeptBroker]:
    broker = KeptBroker(tmp_path)
    try:
        yield broker
    finally:
        broker.stop()


def produce_one_by_one(producer: Producer, topic: str, partition: int, n: int, tag: str) -> None:
    for i in range(n):
        key = None if i % 7 == 0 else f"{tag}-k{i % 13}".encode()
        headers = [("n", str(i).encode()), ("empty", None)] if i % 3 == 0 else None
        producer.produce(topic, value=f"{tag}-{i}".encode(), key=key, partition=partition, headers=headers)
        producer.flush(10)


async def read_all(bootstrap: str, topic: str, partition: int, count: int, wait: float = 60) -> list[Seen]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, fetch_max_wait_ms=100)
    await consumer.start()
    try:
        tp = AioTopicPartition(topic, partition)
        consumer.assign([tp])
        consumer.seek(tp, 0)
        seen: list[Seen] = []
        deadline = time.monotonic() + wait
        while len(seen) < count and time.monotonic() < deadline:
            for records in (await consumer.getmany(timeout_ms=500)).values():
                seen += [(m.offset, m.timestamp, m.key, m.value, tuple(m.headers)) for m in records]
        await asyncio.sleep(1)  # anything beyond `count` would show up as a duplicate
        for records in (await consumer.getmany(timeout_ms=500)).values():
            seen += [(m.offset, m.timestamp, m.key, m.value, tuple(m.headers)) for m in records]
        return seen
    finally:
        await consumer.stop()


def test_compaction_merges_what_a_faust_stage_writes(kept: KeptBroker) -> None:
    """aiokafka without idempotence (every Faust stage's producer) writes base sequence 0 and no producer id.

    Its batches were never merged: a soak's partitions grew by ~1,000 objects in 14 minutes, and every
    fetch listed them all.
    """
    kept.create("stage", 1)
    n = 200

    async def produce() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=kept.bootstrap, linger_ms=0)
        await producer.start()
        try:
            for i in range(n):
                await producer.send_and_wait("stage", f"s-{i}".encode(), key=b"t:u", partition=0)
        finally:
            await producer.stop()

    asyncio.run(produce())
    wait_until(lambda: len(kept.objects("stage", 0)) < 10, 60, "compaction of aiokafka's batches")
    seen = asyncio.run(read_all(kept.bootstrap, "stage", 0, n))
    assert [s[0] for s in seen] == list(range(n))
    assert [s[3] for s in seen] == [f"s-{i}".encode() for i in range(n)]


def read_all_confluent(bootstrap: str, topic: str, partition: int, count: int) -> list[Seen]:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "check", "enable.auto.commit": False, "check.crcs": True}
    )
    consumer.assign([TopicPartition(topic, partition, 0)])
    seen: list[Seen] = []
    deadline = time.monotonic() + 60
    try:
        while len(seen) < count + 1 and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                if len(seen) >= count:
                    break
                continue
            assert message.error() is None, message.error()
            headers = tuple(message.headers() or ())
            seen.append((message.offset(), message.timestamp()[1], message.key(), message.value(), headers))
    finally:
        consumer.close()
    return seen


def test_compaction_keeps_every_record_once_at_its_offset(kept: KeptBroker) -> None:
    kept.create("t", 2)
    n = 600
    follower: list[Seen] = []

    async def follow() -> None:
        follower.extend(await read_all(kept.bootstrap, "t", 0, n, wait=120))

    idempotent = Producer({"bootstrap.servers": kept.bootstrap, "enable.idempotence": True, "linger.ms": 0})
    plain = Producer({"bootstrap.servers": kept.bootstrap, "linger.ms": 0})
    tail = threading.Thread(target=lambda: asyncio.run(follow()))
    tail.start()
    writers = [
        threading.Thread(target=produce_one_by_one, args=(idempotent, "t", 0, n, "a")),
        threading.Thread(target=produce_one_by_one, args=(plain, "t", 1, n, "b")),
    ]
    for w in writers:
        w.start()
    for w in writers:
        w.join()
    wait_until(lambda: len(kept.objects("t", 0)) < 10 and len(kept.objects("t", 1)) < 10, 60, "compaction")
    tail.join(120)

    for partition, tag in ((0, "a"), (1, "b")):
        expected = [f"{tag}-{i}".encode() for i in range(n)]
        seen = asyncio.run(read_all(kept.bootstrap, "t", partition, n))
        assert [s[0] for s in seen] == list(range(n))
        assert [s[3] for s in seen] == expected
        assert seen[3][4] == (("n", b"3"), ("empty", None))
        assert seen[0][2] is None
        assert seen[1][2] == f"{tag}-k1".encode()
        assert read_all_confluent(kept.bootstrap, "t", partition, n) == seen
        if partition == 0:
            assert follower == seen  # the tail saw the same records, once, while the log was rewritten

    # The idempotent producer's sequences still line up with what the broker keeps.
    produce_one_by_one(idempotent, "t", 0, 5, "c")
    seen = asyncio.run(read_all(kept.bootstrap, "t", 0, n + 5))
    assert [s[0] for s in seen] == list(range(n + 5))
    assert seen[-1][3] == b"c-4"


def test_retention_removes_expired_records_from_fetches_and_disk(tmp_path: Path) -> None:
    topics = tmp_path / "topics.yaml"
    topics.write_text(
        "topics:\n"
        "  short: {partitions: 1, retention_ms: 3000, key: k}\n"
        "  forever: {partitions: 1, retention_ms: -1, key: k}\n"
    )
    broker = KeptBroker(tmp_path / "b", topics)
    try:
        broker.create("short", 1, {"retention.ms": "604800000"})  # the topics file wins
        broker.create("forever", 1)
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
        for topic in ("short", "forever"):
            produce_one_by_one(producer, topic, 0, 20, "secret-words")
        assert len(asyncio.run(read_all(broker.bootstrap, "short", 0, 20))) == 20
        wait_until(lambda: not broker.objects("short", 0), 30, "retention")
        time.sleep(3)  # the grace period of rewritten batches
        assert asyncio.run(read_all(broker.bootstrap, "short", 0, 1, wait=3)) == []
        held = subprocess.run(["grep", "-rl", "secret-words", str(tmp_path / "b" / "kafka")], capture_output=True)
        found = held.stdout.decode().split()
        assert found
        assert all("/topics/forever/" in path for path in found), found
        assert len(asyncio.run(read_all(broker.bootstrap, "forever", 0, 20))) == 20
        # New records after everything expired get the next offsets.
        produce_one_by_one(producer, "short", 0, 1, "new")
        seen = asyncio.run(read_all(broker.bootstrap, "short", 0, 1))
        assert [(s[0], s[3]) for s in seen] == [(20, b"new-0")]
    finally:
        broker.stop()
