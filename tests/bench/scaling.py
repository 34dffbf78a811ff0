"""Throughput with 1 vs 2 worker processes: one replay on a fresh stack with MEMSTREAM_WORKERS=1, then 2.

    python -m tests.bench.scaling [--turns 2000] [--users 24]

With 1, one process runs every stage and the read service; with 2, the read
service keeps the index stage and two worker processes share every other
stage's partitions. On a machine with 2 cores a second process brings no
core of its own (the read service, the broker and Postgres share the same
two), so the figure mostly shows that the partitions spread and the split
pipeline keeps up; it is not a promise of linear scaling.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from services.core.stages import INDEX_STAGE, STAGE_NAMES, without
from tests.bench import pipeline
from tests.bench.corpus import conversations
from tests.stack import Stack, embedded_stack, stack_settings, wait_for

REPLAY_BUDGET = 600.0


def _workers_joined(stack: Stack, workers: int) -> bool:
    """Every worker process holds some partitions of every stage it runs (initial rebalances are over)."""
    stages = without(STAGE_NAMES, INDEX_STAGE)
    for number in range(1, workers + 1):
        held = stack.partitions_held(number)
        if any(not held.get(stage) for stage in stages):
            return False
    return True


def run_with(workers: int, corpus: list[dict[str, Any]]) -> dict[str, Any]:
    """A fresh stack with `workers` worker processes, one replay of `corpus`, its figures."""
    out: dict[str, Any] = {"workers": workers}
    env = {"MEMSTREAM_WORKERS": str(workers), "MEMSTREAM_LAG_REFRESH_SECONDS": "0.5"}
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp, embedded_stack(Path(tmp), env) as stack:
        if workers > 1:
            wait_for(lambda: _workers_joined(stack, workers), 120, "workers joined every stage's group", 0.5)
        out["start_seconds"] = round(time.perf_counter() - started, 1)
        try:
            asyncio.run(asyncio.wait_for(pipeline.replay(stack_settings(stack), corpus, out), REPLAY_BUDGET))
        except TimeoutError:
            out["timed_out"] = True
    return out


def compare(corpus: list[dict[str, Any]]) -> dict[str, Any]:
    """Turns per second with 1 and with 2 worker processes, their ratio, and each run's own figures (flat)."""
    runs = {workers: run_with(workers, corpus) for workers in (1, 2)}
    result: dict[str, Any] = {"turns": runs[1].get("turns"), "users": runs[1].get("users")}
    for workers, run in runs.items():
        for key in ("turns_per_s", "seconds", "produce_seconds", "start_seconds", "covered", "stalled", "timed_out"):
            if key in run:
                result[f"{key}_{workers}_worker{'s' if workers > 1 else ''}"] = run[key]
    if runs[1].get("turns_per_s") and runs[2].get("turns_per_s"):
        result["ratio_2_to_1"] = runs[2]["turns_per_s"] / runs[1]["turns_per_s"]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=2_000)
    parser.add_argument("--users", type=int, default=24)
    args = parser.parse_args()
    result = compare(conversations(args.turns, args.users))
    out = Path("bench-results") / "worker-scaling.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
