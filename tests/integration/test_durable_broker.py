"""The embedded broker as `memstream up` runs it: tansu on S3 storage served by ops/s3store.py.

Both processes are started by the same functions the stack uses
(ops/embedded/broker.py), killed with SIGKILL (no chance to flush anything), and
started again on the same files: what was acknowledged must come back byte
for byte, committed offsets included.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka import TopicPartition as AioTopicPartition
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from agents.housekeeping import partition_lag
from ops.embedded.broker import broker_child, kafka_store_child
from ops.embedded.supervision import Child, free_port, tcp_open, wait_until
from services.core.config import Settings
from tests.bench.probe import pin_to_log_end


@dataclass
class Broker:
    """tansu and, for S3 storage, its store; restartable on the same files and ports."""

    settings: Settings
    log_dir: Path
    storage: str
    store_port: int = field(default_factory=free_port)
    children: list[Child] = field(default_factory=list)

    @property
    def bootstrap(self) -> str:
        return self.settings.kafka_bootstrap

    def start(self) -> float:
        """Seconds until the broker lists its topics again."""
        started = time.monotonic()
        endpoint = None
        if self.storage == "s3":
            store = kafka_store_child(self.settings, self.store_port, self.log_dir)
            store.start()
            wait_until(lambda: tcp_open("127.0.0.1", self.store_port), 30, "store")
            self.children = [store]
            endpoint = f"http://127.0.0.1:{self.store_port}"
        broker = broker_child(self.settings, self.log_dir, s3_endpoint=endpoint)
        broker.start()
        self.children.append(broker)
        wait_until(lambda: topics(self.bootstrap, timeout=2) is not None, 30, "broker metadata")
        return time.monotonic() - started

    def kill9(self) -> None:
        for child in self.children:
            if child.proc is not None and child.proc.poll() is None:
                os.killpg(child.proc.pid, signal.SIGKILL)
            child.stop()

    def stop(self) -> None:
        for child in reversed(self.children):
            child.stop()


def make_broker(tmp_path: Path, storage: str) -> Iterator[Broker]:
    (tmp_path / "logs").mkdir()
    settings = Settings(data_dir=tmp_path, kafka_bootstrap=f"127.0.0.1:{free_port()}")
    broker = Broker(settings, tmp_path / "logs", storage)
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture
def s3_broker(tmp_path: Path) -> Iterator[Broker]:
    yield from make_broker(tmp_path, "s3")


@pytest.fixture(params=["s3", "memory"])
def any_broker(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Broker]:
    yield from make_broker(tmp_path, request.param)


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until the answer: its futures die with it
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)


def topics(bootstrap: str, timeout: float = 30) -> dict[str, int]:
    """Topic name -> partition count, internal topics left out."""
    listed = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=timeout).topics
    return {name: len(meta.partitions) for name, meta in listed.items() if not name.startswith("__")}


def produce(bootstrap: str, topic: str, values: list[bytes]) -> dict[int, list[bytes]]:
    """Idempotently, in batches (as memstream's producers do); the values each partition holds, in order."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    placed: dict[int, list[tuple[int, bytes]]] = {}

    def report(error: object, message: object) -> None:
        assert error is None, error
        placed.setdefault(message.partition(), []).append((message.offset(), message.value()))  # type: ignore[attr-defined]

    for n, value in enumerate(values):
        producer.produce(topic, value, key=f"user-{n % 7}".encode(), on_delivery=report)
        producer.poll(0)
    assert producer.flush(60) == 0
    return {p: [v for _, v in sorted(msgs)] for p, msgs in placed.items()}


def consumer(bootstrap: str, group: str) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 100,
            "session.timeout.ms": 6000,
        }
    )


def read(bootstrap: str, topic: str, group: str, count: int, within: float = 60) -> dict[int, list[bytes]]:
    """`count` messages read by a member of `group` from its committed offsets (earliest without)."""
    reader = consumer(bootstrap, group)
    reader.subscribe([topic])
    got: dict[int, list[bytes]] = {}
    deadline = time.monotonic() + within
    try:
        while sum(map(len, got.values())) < count and time.monotonic() < deadline:
            for message in reader.consume(500, 0.5):
                assert message.error() is None, message.error()
                got.setdefault(message.partition(), []).append(message.value())
    finally:
        reader.close()
    return got


def commit(bootstrap: str, topic: str, group: str, offsets: dict[int, int]) -> None:
    committer = consumer(bootstrap, group)
    try:
        committer.commit(offsets=[TopicPartition(topic, p, o) for p, o in offsets.items()], asynchronous=False)
    finally:
        committer.close()


def committed(bootstrap: str, topic: str, group: str, partitions: int) -> dict[int, int]:
    reader = consumer(bootstrap, group)
    try:
        found = reader.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=30)
        return {tp.partition: tp.offset for tp in found}
    finally:
        reader.close()


def test_messages_and_committed_offsets_survive_kill9_of_broker_and_store(s3_broker: Broker) -> None:
    topic, group = f"dur-{uuid.uuid4().hex[:6]}", "resumer"
    create_topic(s3_broker.bootstrap, topic, 2)
    values = [f"{n:06d}:".encode() + os.urandom(64).hex().encode() for n in range(1000)]
    held = produce(s3_broker.bootstrap, topic, values)
    assert sorted(held) == [0, 1]
    halfway = {p: len(msgs) // 2 for p, msgs in held.items()}
    commit(s3_broker.bootstrap, topic, group, halfway)

    s3_broker.kill9()
    restart_seconds = s3_broker.start()
    print(f"\nbroker and store back in {restart_seconds:.2f}s")

    assert topics(s3_broker.bootstrap) == {topic: 2}
    assert committed(s3_broker.bootstrap, topic, group, 2) == halfway
    rest = {p: msgs[halfway[p] :] for p, msgs in held.items()}
    assert read(s3_broker.bootstrap, topic, group, sum(map(len, rest.values()))) == rest
    assert read(s3_broker.bootstrap, topic, "fresh", len(values)) == held


def test_topics_created_at_once_all_survive(s3_broker: Broker) -> None:
    """Each creation is a compare-and-swap on tansu's one metadata object: concurrent ones must not overwrite."""
    names = [f"burst-{n:02d}-{uuid.uuid4().hex[:4]}" for n in range(40)]
    creators = [threading.Thread(target=create_topic, args=(s3_broker.bootstrap, name, 3)) for name in names]
    for creator in creators:
        creator.start()
    for creator in creators:
        creator.join()
    assert topics(s3_broker.bootstrap) == dict.fromkeys(names, 3)
    s3_broker.kill9()
    s3_broker.start()
    assert topics(s3_broker.bootstrap) == dict.fromkeys(names, 3)


async def test_a_fetch_reports_the_true_log_end(any_broker: Broker) -> None:
    """The consumer-lag gauge subtracts from the high watermark of fetch responses, which tansu gets right.

    Its ListOffsets "latest" (end_offsets, auto_offset_reset=latest) does
    not: it answers the first offset of some recent batch plus one, short of
    the end whenever that batch holds more than one message.
    """
    topic = f"end-{uuid.uuid4().hex[:6]}"
    create_topic(any_broker.bootstrap, topic, 1)
    for _ in range(5):
        produce(any_broker.bootstrap, topic, [b"m"] * 200)
    partition = AioTopicPartition(topic, 0)
    reader = AIOKafkaConsumer(bootstrap_servers=any_broker.bootstrap, enable_auto_commit=False)
    await reader.start()
    try:
        reader.assign([partition])
        reader.seek(partition, 400)
        got = 0
        deadline = time.monotonic() + 30
        while reader.highwater(partition) is None and time.monotonic() < deadline:
            got += sum(map(len, (await reader.getmany(timeout_ms=500)).values()))
        assert reader.highwater(partition) == 1000
        assert partition_lag(reader.highwater(partition), 400 + got) == 600 - got
        listed = (await reader.end_offsets([partition]))[partition]
        print(f"\n{any_broker.storage}: fetch high watermark 1000, ListOffsets latest {listed}")
    finally:
        await reader.stop()


async def test_a_watcher_pinned_to_the_log_end_sees_only_what_comes_after(any_broker: Broker) -> None:
    """tests/bench/probe.py's ChangeWatcher start: seek_to_end() alone would replay part of the last batch."""
    topic = f"pin-{uuid.uuid4().hex[:6]}"
    create_topic(any_broker.bootstrap, topic, 2)
    for _ in range(3):
        produce(any_broker.bootstrap, topic, [b"before"] * 300)
    watcher = AIOKafkaConsumer(topic, bootstrap_servers=any_broker.bootstrap, fetch_max_wait_ms=50)
    await watcher.start()
    try:
        await pin_to_log_end(watcher)
        produce(any_broker.bootstrap, topic, [b"after"] * 5)
        seen: list[bytes] = []
        deadline = time.monotonic() + 20
        while len(seen) < 5 and time.monotonic() < deadline:
            seen += [m.value for msgs in (await watcher.getmany(timeout_ms=200)).values() for m in msgs if m.value]
        await asyncio.sleep(0.5)
        seen += [m.value for msgs in (await watcher.getmany(timeout_ms=200)).values() for m in msgs if m.value]
        assert seen == [b"after"] * 5
    finally:
        await watcher.stop()
