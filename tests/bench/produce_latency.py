"""What one acknowledged produce costs on the embedded broker, by how many partitions it touches.

    python -m tests.bench.produce_latency [--rounds 60] [--seconds 20]

Every stage waits for the broker's acknowledgement of what a batch sent
before it takes the next batch (offsets only after effects), so this wait
is part of every hop of freshness. tansu on the store (ops/s3store.py,
as the embedded stack runs them, keeper on) and an 8-partition topic; each
round sends one 300-byte message to each of k partitions (acks=all, no
linger, so one produce request) and times until all are acknowledged, with
a 50 ms pause between rounds. Then, with 8 partitions a request and no
pause, the requests per second and the cores the store and tansu use.
Prints a table and writes bench-results/produce-latency.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaProducer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.bench.freshness_probe import cpu_seconds
from tests.bench.log import Rig
from tests.bench.probe import percentiles

TOPIC = "bench.produce"
PARTITIONS = 8
ALL = list(range(PARTITIONS))
OUT = Path("bench-results/produce-latency.json")


async def acknowledged(producer: AIOKafkaProducer, partitions: list[int]) -> float:
    started = time.perf_counter()
    sent = [await producer.send(TOPIC, b"x" * 300, partition=p) for p in partitions]
    await asyncio.gather(*sent)
    return time.perf_counter() - started


async def measure(rig: Rig, rounds: int, seconds: float) -> dict[str, Any]:
    producer = AIOKafkaProducer(bootstrap_servers=rig.settings.kafka_bootstrap, acks="all", linger_ms=0)
    await producer.start()
    try:
        await acknowledged(producer, ALL)  # metadata and connections
        shapes = {f"{k} partitions": list(range(k)) for k in (1, 2, 4, 8)}
        shapes["8 messages, 1 partition"] = [0] * 8
        latency: dict[str, Any] = {}
        for name, partitions in shapes.items():
            samples = []
            for _ in range(rounds):
                samples.append(await acknowledged(producer, partitions))
                await asyncio.sleep(0.05)
            latency[name] = percentiles(samples)
        store, broker = (child.proc.pid for child in rig.children if child.proc is not None)
        before = time.perf_counter(), cpu_seconds(store), cpu_seconds(broker)
        requests = 0
        while time.perf_counter() - before[0] < seconds:
            await acknowledged(producer, ALL)
            requests += 1
        elapsed = time.perf_counter() - before[0]
        saturated = {
            "requests_per_s": requests / elapsed,
            "partition_writes_per_s": requests * PARTITIONS / elapsed,
            "store_cores": (cpu_seconds(store) - before[1]) / elapsed,
            "tansu_cores": (cpu_seconds(broker) - before[2]) / elapsed,
        }
        return {"ack_seconds": latency, "saturated_8_partitions": saturated}
    finally:
        await producer.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--seconds", type=float, default=20.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        rig = Rig(Path(tmp))
        rig.start(keeper=True)
        try:
            admin = AdminClient({"bootstrap.servers": rig.settings.kafka_bootstrap})
            for future in admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)]).values():
                future.result(30)
            results = asyncio.run(measure(rig, args.rounds, args.seconds))
        finally:
            rig.stop()
    for name, p in results["ack_seconds"].items():
        print(
            f"{name:24s} ack p50 {p['p50'] * 1000:6.1f} ms  p95 {p['p95'] * 1000:6.1f} ms  p99 {p['p99'] * 1000:6.1f} ms"
        )
    s = results["saturated_8_partitions"]
    print(
        f"saturated, 8 partitions a request: {s['requests_per_s']:.1f} requests/s "
        f"({s['partition_writes_per_s']:.0f} partition writes/s), store {s['store_cores']:.2f} cores, "
        f"tansu {s['tansu_cores']:.2f} cores"
    )
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
