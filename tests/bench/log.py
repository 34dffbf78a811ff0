"""`make bench-log`: the embedded broker's log at 10k / 100k / 1M produce requests in one partition.

    python -m tests.bench.log [--sizes 10000,100000,1000000] [--retention-days 7]

A partition that took N single-message produce requests holds N batch
objects. Producing them through tansu runs at a few hundred requests a
second (an hour for 1M), so each size is simulated: tansu creates the topic
and takes one real produce, then the store's folder gets N - 1 more batch
files written as tansu writes them (same name, same bytes a producer sends,
file times one per `spacing` seconds into the past) and the watermark that
goes with them. Then, with the log keeper off and then on:

- tail: a consumer at the end of the partition, one message produced, the
  seconds until it arrives (30 s = never);
- keeper: seconds until the keeper has rewritten the backlog, objects left;
- replay: records per second reading the partition from offset 0 (aiokafka);
- disk: bytes under the store's folder, with files spread over
  2 x retention so half of them are past it (the 7-day retention case).

Prints a table and writes bench-results/log.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from ops.embedded.broker import broker_child
from ops.embedded.supervision import Child, wait_until
from ops.embedded.supervision import free_port as _free_port
from ops.embedded.supervision import tcp_open as _tcp_open
from services.core.config import Settings

RESULTS = Path("bench-results")
TOPIC = "log.bench"
NEVER = 30.0


def turn_like(i: int) -> bytes:
    return orjson.dumps(
        {
            "event_id": f"e-{i}",
            "tenant_id": "bench",
            "user_id": f"u{i % 500}",
            "session_id": f"s{i // 40}",
            "role": "user" if i % 2 else "assistant",
            "content": f"turn {i}: I'd like to plan the trip to Lisbon in May, somewhere near the river.",
            "ts": "2026-11-24T12:00:00Z",
        }
    )


class Rig:
    """tansu on the store, restartable on the same folder with the keeper on or off."""

    def __init__(self, root: Path) -> None:
        self.root = root
        (root / "logs").mkdir(parents=True, exist_ok=True)
        self.settings = Settings(data_dir=root, kafka_bootstrap=f"127.0.0.1:{_free_port()}")
        self.children: list[Child] = []

    def start(self, keeper: bool, retention_ms: int | None = None) -> None:
        port = _free_port()
        argv = [sys.executable, "-m", "ops.s3store", str(self.root / "kafka"), "--port", str(port)]
        argv += ["--bucket", "tansu", "--keeper-interval", "1", "--keeper-settle", "5", "--keeper-grace", "5"]
        if not keeper:
            argv.append("--no-keeper")
        if retention_ms is not None:
            topics = self.root / "topics.yaml"
            topics.write_text(f"topics:\n  {TOPIC}: {{partitions: 1, retention_ms: {retention_ms}, key: k}}\n")
            argv += ["--topics-file", str(topics)]
        store = Child("kafka-store", argv, self.root / "logs")
        store.start()
        wait_until(lambda: _tcp_open("127.0.0.1", port), 120, "store")
        broker = broker_child(self.settings, self.root / "logs", s3_endpoint=f"http://127.0.0.1:{port}")
        broker.start()
        self.children = [store, broker]
        admin = AdminClient({"bootstrap.servers": self.settings.kafka_bootstrap})
        wait_until(lambda: admin.list_topics(timeout=2) is not None, 60, "broker")

    def stop(self) -> None:
        for child in reversed(self.children):
            child.stop()

    @property
    def records(self) -> Path:
        return next((self.root / "kafka" / "tansu" / "clusters").glob(f"*/topics/{TOPIC}/partitions/0000000000"))


def fill(rig: Rig, n: int, spacing: float) -> None:
    """The topic created by tansu, then n one-message batch files as tansu writes them, the newest last."""
    admin = AdminClient({"bootstrap.servers": rig.settings.kafka_bootstrap})
    for future in admin.create_topics([NewTopic(TOPIC, 1, 1)]).values():
        future.result(30)
    rig.stop()
    cluster = next((rig.root / "kafka" / "tansu" / "clusters").iterdir())
    folder = cluster / "topics" / TOPIC / "partitions" / "0000000000" / "records"
    folder.mkdir(parents=True, exist_ok=True)
    now = time.time()
    for i in range(n):
        at = now - (n - i) * spacing
        builder = DefaultRecordBatchBuilder(
            2, 0, 0, -1, -1, 0, 1 << 16
        )  # as aiokafka writes: no producer id, sequence 0
        builder.append(0, int(at * 1000), f"bench:u{i % 500}".encode(), turn_like(i), [])
        path = folder / f"{i:020d}.batch"
        path.write_bytes(bytes(builder.build()))
        os.utime(path, (at, at))
    (rig.records / "watermark.json").write_text(json.dumps({"low": None, "high": n, "timestamps": None}))


async def tail_seconds(bootstrap: str, at: int) -> float:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, fetch_max_wait_ms=100)
    await consumer.start()
    try:
        tp = TopicPartition(TOPIC, 0)
        consumer.assign([tp])
        consumer.seek(tp, at)
        await consumer.getmany(timeout_ms=500)
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
        started = time.perf_counter()
        producer.produce(TOPIC, value=b"tail", partition=0)
        producer.flush(30)
        while time.perf_counter() - started < NEVER:
            for records in (await consumer.getmany(timeout_ms=200)).values():
                if any(r.value == b"tail" for r in records):
                    return time.perf_counter() - started
        return NEVER
    finally:
        await consumer.stop()


async def replay_rate(bootstrap: str, count: int) -> float:
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, enable_auto_commit=False, fetch_max_wait_ms=100, max_partition_fetch_bytes=4 << 20
    )
    await consumer.start()
    try:
        tp = TopicPartition(TOPIC, 0)
        consumer.assign([tp])
        consumer.seek(tp, 0)
        seen, started = 0, time.perf_counter()
        while seen < count and time.perf_counter() - started < 600:
            for records in (await consumer.getmany(timeout_ms=1000, max_records=100_000)).values():
                seen += len(records)
        return seen / (time.perf_counter() - started)
    finally:
        await consumer.stop()


def disk_bytes(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


def objects(rig: Rig) -> int:
    return len(os.listdir(rig.records / "records"))


def measure(n: int, workdir: Path) -> dict[str, Any]:
    out: dict[str, Any] = {"requests": n}
    rig = Rig(workdir / f"n{n}")
    rig.start(keeper=False)
    started = time.perf_counter()
    fill(rig, n, spacing=0.005)
    out["fill_s"] = round(time.perf_counter() - started, 1)
    rig.start(keeper=False)
    out["tail_s_without_keeper"] = round(asyncio.run(tail_seconds(rig.settings.kafka_bootstrap, n)), 3)
    rig.stop()
    rig.start(keeper=True)
    started = time.perf_counter()
    wait_until(lambda: objects(rig) < max(50, n // 2000), 1800, "keeper", interval=1)
    out["keeper_s"] = round(time.perf_counter() - started, 1)
    out["objects_after"] = objects(rig)
    out["tail_s"] = round(asyncio.run(tail_seconds(rig.settings.kafka_bootstrap, n + 1)), 3)
    out["replay_records_per_s"] = round(asyncio.run(replay_rate(rig.settings.kafka_bootstrap, n + 2)))
    rig.stop()
    shutil.rmtree(rig.root)
    return out


def measure_retention(n: int, retention_days: float, workdir: Path) -> dict[str, Any]:
    """The same number of requests spread over twice the retention period: half of them expired."""
    out: dict[str, Any] = {"requests": n, "retention_days": retention_days}
    rig = Rig(workdir / f"r{n}")
    rig.start(keeper=False)
    retention_s = retention_days * 86_400
    fill(rig, n, spacing=2 * retention_s / n)
    out["disk_mib_before_retention"] = round(disk_bytes(rig.root / "kafka") / 2**20, 1)
    rig.start(keeper=True, retention_ms=int(retention_s * 1000))
    wait_until(lambda: objects(rig) < max(50, n // 2000), 1800, "retention", interval=1)
    time.sleep(8)  # rewritten batches stay readable for the grace period (5 s here), then go
    out["disk_mib_after_retention"] = round(disk_bytes(rig.root / "kafka") / 2**20, 1)
    out["objects_after_retention"] = objects(rig)
    rig.stop()
    shutil.rmtree(rig.root)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.log", description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--retention-days", type=float, default=7.0)
    args = parser.parse_args()
    RESULTS.mkdir(exist_ok=True)
    rows = []
    with tempfile.TemporaryDirectory(prefix="memstream-log-bench-") as tmp:
        for n in (int(s) for s in args.sizes.split(",")):
            for row in (measure(n, Path(tmp)), measure_retention(n, args.retention_days, Path(tmp))):
                rows.append(row)
                print(json.dumps(row), flush=True)
    (RESULTS / "log.json").write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
