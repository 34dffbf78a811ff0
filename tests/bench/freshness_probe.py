"""Where freshness's tail comes from: `make bench`'s replay then freshness stages, with a timeline.

    python -m tests.bench.freshness_probe [--turns 5000] [--seconds 60] [--rate 20] [--env KEY=VALUE ...]
        [--seed 100000 --load-clients 8]

Starts the embedded stack as tests/bench/run.py does, replays the corpus,
then runs the freshness stage (tests/bench/pipeline.py) while sampling the
app process every half second: its CPU, each stage's events in, batches and
processing time, and the consumer lags. It prints the percentiles, the
slowest probes split into produce -> change on memory.changes -> recalled,
and the samples around each of them, so a slow probe can be set beside what
the process was doing at that moment. `--env` passes settings to the stack,
to try a value without changing a default. `--seed` and `--load-clients`
give `make bench`'s freshness_under_load stage: memories seeded as its
recall stages have them, then clients recalling without pause meanwhile.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from services.core import topics
from tests.bench import pipeline, recall_load
from tests.bench.corpus import conversations
from tests.bench.probe import TailWatcher, percentiles
from tests.stack import Stack, embedded_stack, stack_settings

# Counters and histogram parts sampled per stage, as deltas between samples.
PER_STAGE = {
    "memstream_stage_events_in_total": "in",
    "memstream_stage_batch_size_count": "batches",
    "memstream_stage_processing_seconds_sum": "busy",
}
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of `pid` and its waited-for children."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(f) for f in fields[11:15]) / TICKS


def machine_busy() -> tuple[float, float]:
    """Busy and total CPU seconds of the whole machine: the stack's other processes and anyone else's."""
    ticks = [int(f) for f in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = ticks[3] + ticks[4]
    return (sum(ticks) - idle) / TICKS, sum(ticks) / TICKS


def command_name(proc: Path, comm: str) -> str:
    """`comm`, or for Python the module or script it runs (the app, the S3 store, this probe...)."""
    if not comm.startswith("python"):
        return comm
    try:
        argv = (proc / "cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return comm
    if "-m" in argv[:-1]:
        return " ".join(argv[argv.index("-m") + 1 : argv.index("-m") + 3])
    return next((Path(a).name for a in argv[1:] if a.endswith(".py")), comm)


def cpu_by_command() -> dict[str, float]:
    """CPU seconds of every process on the machine, summed by command name (tansu, postgres, python...)."""
    seconds: dict[str, float] = defaultdict(float)
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            head, tail = stat.read_text().rsplit(")", 1)
        except OSError:
            continue  # gone meanwhile
        fields = tail.split()
        seconds[command_name(stat.parent, head.split("(", 1)[1])] += (int(fields[11]) + int(fields[12])) / TICKS
    return seconds


def read_metrics(text: str) -> dict[str, float]:
    """The sampled series, flattened to 'short:stage' -> value."""
    flat: dict[str, float] = defaultdict(float)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            stage = sample.labels.get("stage") or sample.labels.get("topic", "")
            if sample.name in PER_STAGE:
                flat[f"{PER_STAGE[sample.name]}:{stage}"] += sample.value
            elif sample.name == "memstream_consumer_lag_messages":
                flat[f"lag:{stage}"] += sample.value
    return flat


async def sample(stack: Stack, t0: list[float], rows: list[dict[str, Any]], stop: asyncio.Event) -> None:
    """Every 0.5 s: deltas of CPU and the per-stage series since the last sample, lags as they stand."""
    pid = stack.app_pid()
    async with httpx.AsyncClient(base_url=stack.stages_url, timeout=10) as client:
        last_cpu, last_at, last_busy = cpu_seconds(pid), time.perf_counter(), machine_busy()
        last_commands = cpu_by_command()
        last = read_metrics((await client.get("/metrics")).text)
        while not stop.is_set():
            await asyncio.sleep(0.5)
            now_metrics = read_metrics((await client.get("/metrics")).text)
            cpu, at, busy = cpu_seconds(pid), time.perf_counter(), machine_busy()
            row: dict[str, Any] = {
                "t": round(at - t0[0], 2),
                "cpu": round((cpu - last_cpu) / (at - last_at), 2),
                # Busy cores of the whole machine (of os.cpu_count()).
                "all": round((busy[0] - last_busy[0]) / (busy[1] - last_busy[1]) * (os.cpu_count() or 1), 2),
            }
            commands = cpu_by_command()
            for command, used in commands.items():
                share = (used - last_commands.get(command, used)) / (at - last_at)
                if share >= 0.05:
                    row[f"cpu:{command}"] = round(share, 2)
            last_commands = commands
            for key, value in now_metrics.items():
                row[key] = value if key.startswith("lag:") else round(value - last.get(key, 0.0), 3)
            rows.append({k: v for k, v in row.items() if v})
            last, last_cpu, last_at, last_busy = now_metrics, cpu, at, busy


def attribute(timeline: list[dict[str, Any]], seen: dict[str, dict[str, float]]) -> None:
    """Each probe's seconds from produce to its candidate and to its embedded candidate (broker timestamps)."""
    names = {topics.CANDIDATES: "windowed", topics.EMBEDDED: "embedded"}
    for entry in timeline:
        for topic, at in seen.get(entry["token"], {}).items():
            entry[names[topic]] = at - entry["produced_at"]


def summary(timeline: list[dict[str, Any]], rows: list[dict[str, Any]], worst: int) -> None:
    recalled = [e["recalled"] for e in timeline if "recalled" in e]
    changed = [e["change"] for e in timeline if "change" in e]
    hops = {
        "produce->windowed": [e["windowed"] for e in timeline if "windowed" in e],
        "windowed->embedded": [e["embedded"] - e["windowed"] for e in timeline if "embedded" in e and "windowed" in e],
        "embedded->change": [e["change"] - e["embedded"] for e in timeline if "embedded" in e and "change" in e],
    }
    tails = [e["recalled"] - e["change"] for e in timeline if "recalled" in e and "change" in e]
    print("produce->recalled ", {k: round(v, 3) for k, v in percentiles(recalled).items()})
    print("produce->change   ", {k: round(v, 3) for k, v in percentiles(changed).items()})
    for name, values in hops.items():
        print(f"{name:18}", {k: round(v, 3) for k, v in percentiles(values).items()})
    print("change->recalled  ", {k: round(v, 3) for k, v in percentiles(tails).items()})
    for e in sorted(timeline, key=lambda e: -e.get("recalled", 99.0))[:worst]:
        marks = " ".join(f"{k} {e[k]:.3f}s" for k in ("windowed", "embedded", "change", "recalled") if k in e)
        print(f"probe at {e['at']:6.2f}s: {marks}")
        for row in rows:
            if e["at"] - 0.5 <= row["t"] <= e["at"] + e.get("recalled", 2.0) + 0.5:
                print("   ", json.dumps(row))


class HopWatcher(TailWatcher):
    """When each probe token first appeared on the plain topics between the stages, by the messages' timestamps.

    memory.candidates (the window is done) and memory.embedded (the embedder
    is done) carry the turn's text in clear; memory.changes (the consolidator
    is done) is what the bench's ChangeWatcher already times.
    """

    TOPICS = (topics.CANDIDATES, topics.EMBEDDED)

    def __init__(self, bootstrap: str) -> None:
        super().__init__(bootstrap, *self.TOPICS)
        self.seen: dict[str, dict[str, float]] = defaultdict(dict)

    async def on_batch(self, fetched: dict[Any, list[Any]], arrival: float) -> None:
        for tp, messages in fetched.items():
            for m in messages:
                for token in re.findall(rb"zq[0-9a-f]{6}x\d+", m.value or b""):
                    self.seen[token.decode()].setdefault(tp.topic, m.timestamp / 1000)


async def on_stack(stack: Stack, args: argparse.Namespace) -> dict[str, Any]:
    settings = stack_settings(stack)
    print("app pid:", stack.app_pid(), flush=True)
    replayed: dict[str, Any] = {}
    await pipeline.replay(settings, conversations(args.turns, args.users), replayed)
    print("replay:", replayed, flush=True)
    if args.seed:
        seeded: dict[str, Any] = {}
        await recall_load.seed(
            stack.stages_url, settings.kafka_bootstrap, settings.pg_dsn, args.seed, args.load_users, 900, seeded
        )
        print("seed:", seeded, flush=True)
    timeline: list[dict[str, Any]] = []
    rows: list[dict[str, Any]] = []
    stop = asyncio.Event()
    t0 = [time.perf_counter()]
    sampler = asyncio.create_task(sample(stack, t0, rows, stop))
    out: dict[str, Any] = {}
    t0[0] = time.perf_counter()
    loaded: dict[str, Any] = {}
    async with HopWatcher(settings.kafka_bootstrap) as hops:
        await asyncio.gather(
            pipeline.freshness(
                settings, stack.base_url, args.rate, args.seconds, out, headers=stack.headers, timeline=timeline
            ),
            *(
                [
                    recall_load.read_load(
                        stack.base_url, args.load_users, args.load_clients, args.seconds + 5, loaded, stack.headers
                    )
                ]
                if args.load_clients
                else []
            ),
        )
    if loaded:
        print("read load:", {k: round(v, 4) if isinstance(v, float) else v for k, v in loaded.items()}, flush=True)
    attribute(timeline, hops.seen)
    stop.set()
    await sampler
    print("freshness:", {k: round(v, 3) if isinstance(v, float) else v for k, v in out.items()}, flush=True)
    summary(timeline, rows, args.worst)
    return {"replay": replayed, "out": out, "timeline": timeline, "samples": rows}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=5_000)
    parser.add_argument("--users", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--rate", type=float, default=20.0)
    parser.add_argument("--seed", type=int, default=0, help="memories to seed before the stage (make bench: 100000)")
    parser.add_argument("--load-users", type=int, default=500, help="users the seed spreads over")
    parser.add_argument("--load-clients", type=int, default=0, help="clients recalling without pause meanwhile")
    parser.add_argument("--worst", type=int, default=5, help="slowest probes to print with their samples")
    parser.add_argument("--env", action="append", default=[], help="KEY=VALUE for the stack, repeatable")
    parser.add_argument("--dump", help="write the timeline and samples to this JSON file")
    parser.add_argument("--log", help="copy the stack's logs to this directory before they are removed")
    args = parser.parse_args()
    # The same gauges' refresh as tests/bench/run.py, so the stack behaves as it does under `make bench`.
    env = {"MEMSTREAM_LAG_REFRESH_SECONDS": "0.5", "MEMSTREAM_GAUGE_REFRESH_SECONDS": "2"}
    env.update(item.split("=", 1) for item in args.env)
    with tempfile.TemporaryDirectory() as tmp, embedded_stack(Path(tmp), extra_env=env) as stack:
        try:
            measured = asyncio.run(on_stack(stack, args))
            if args.dump:
                Path(args.dump).write_text(json.dumps(measured, indent=1))
        finally:
            if args.log:
                shutil.copytree(stack.data_dir / "logs", args.log, dirs_exist_ok=True)
                shutil.copy(stack.data_dir / "up.log", args.log)


if __name__ == "__main__":
    main()
