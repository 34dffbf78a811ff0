"""Recall with 1, 2 and 3 read replicas on one data dir, and freshness while 8 clients recall.

    python -m tests.bench.replicas [--quick] [--counts 1,2,3]   (make bench-replicas)

One stack with one replica is seeded (memories straight into
`memory.embedded`, as `make bench` seeds), then the same data dir is started
again with each replica count: a replica that had no shard fills one from
the beginning of `memory.changes`, which gives the rate of that fill. For
each count: the recall figures of `make bench` (as ratios to one bare query
embedding), the CPU each recall costs the replicas (their CPU seconds over
the concurrent run divided by its requests: on N free cores, N / that is the
ceiling in recalls/s), and freshness at 20 turns/s while `clients` clients
recall without pause. Writes bench-results/bench-replicas.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.bench import pipeline, recall_load
from tests.bench.probe import peak_rss_mib
from tests.stack import Stack, embedded_stack, stack_settings, wait_for

RESULTS = Path("bench-results")
_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Plan:
    memories: int = 100_000
    users: int = 500
    clients: int = 8
    seconds: float = 30.0
    fresh_rate: float = 20.0
    fresh_seconds: float = 60.0

    @classmethod
    def quick(cls) -> Plan:
        return cls(memories=3_000, users=50, seconds=6.0, fresh_seconds=10.0)


def env(replicas: int) -> dict[str, str]:
    return {"MEMSTREAM_READ_REPLICAS": str(replicas), "MEMSTREAM_LAG_REFRESH_SECONDS": "0.5"}


def replica_pids(stack: Stack, count: int) -> list[int]:
    return [int((stack.data_dir / "run" / f"replica-{n}.pid").read_text()) for n in range(1, count + 1)]


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU of `pids` so far (from /proc; a process gone counts 0)."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / _TICKS


def replicas_settled(stack: Stack, count: int) -> bool:
    """Every replica has reported itself caught up with lag 0 (whichever replica answers says so for all)."""
    response = stack.get("/readyz")
    if response.status_code != 200:
        return False
    listed = response.json().get("replica", {}).get("replicas", {})
    return len(listed) >= count and all(r["lag"] == 0 and r["report_age_seconds"] < 5 for r in listed.values())


async def measure(stack: Stack, plan: Plan, count: int, out: dict[str, Any]) -> None:
    url, headers = stack.base_url, stack.headers
    pids = replica_pids(stack, count)
    figures: dict[str, Any] = {}
    await recall_load.recall_figures(url, plan.users, plan.clients, plan.seconds, figures, headers=headers)
    out.update({k: v for k, v in figures.items() if k.startswith(("bare_", "single_p", "concurrent_", "single_req"))})
    # CPU per recall on the replicas: a run of its own, read path only.
    run: dict[str, Any] = {}
    before = cpu_seconds(pids)
    await recall_load.load(url, plan.users, plan.clients, plan.seconds, run, headers=headers, record_access=False)
    spent = cpu_seconds(pids) - before
    out["cpu_ms_per_recall"] = 1000 * spent / max(run["requests"], 1)
    out["cpu_run_requests_per_s"] = run["requests_per_s"]
    # Freshness while the clients recall without pause.
    loaded: dict[str, Any] = {}
    fresh: dict[str, Any] = {}
    settings = stack_settings(stack)
    await asyncio.gather(
        recall_load.read_load(url, plan.users, plan.clients, plan.fresh_seconds + 5, loaded, headers),
        pipeline.freshness(settings, url, plan.fresh_rate, plan.fresh_seconds, fresh, headers=headers),
    )
    out["freshness_under_load"] = {k: fresh.get(k) for k in ("n", "misses", "p50", "p95", "p99")}
    out["freshness_under_load"]["recall_p95_ms"] = loaded.get("p95", 0) * 1000
    out["peak_rss_mib"] = {f"replica-{n}": peak_rss_mib(pid) for n, pid in enumerate(pids, 1)}


def run(plan: Plan, counts: list[int]) -> dict[str, Any]:
    results: dict[str, Any] = {"plan": plan.__dict__}
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = Path(tmp) / "stack"
        with embedded_stack(data_dir, env(1)) as stack:
            seed: dict[str, Any] = {}
            dsn = stack_settings(stack).pg_dsn
            asyncio.run(recall_load.seed(stack.stages_url, stack.bootstrap, dsn, plan.memories, plan.users, 1800, seed))
            started = time.perf_counter()
            wait_for(lambda: replicas_settled(stack, 1), 900, "replica 1 caught up", 1.0)
            seed["replica_catch_up_seconds"] = time.perf_counter() - started
            results["seed"] = seed
            print(f"  seed: {seed}", flush=True)
        for count in counts:
            out: dict[str, Any] = {}
            started = time.perf_counter()
            with embedded_stack(data_dir, env(count)) as stack:
                out["ready_seconds"] = time.perf_counter() - started
                wait_for(lambda: replicas_settled(stack, count), 1800, f"{count} replicas caught up", 1.0)  # noqa: B023
                # Replicas new to this data dir filled their shards from the log meanwhile.
                out["all_caught_up_seconds"] = time.perf_counter() - started
                asyncio.run(measure(stack, plan, count, out))
            results[f"replicas_{count}"] = out
            print(f"  replicas_{count}: {out}", flush=True)
    return results


def summary(results: dict[str, Any]) -> dict[str, Any]:
    """The goals' figures side by side: 8-client p95 (read path, and marks on) and 1-client p95 as ratios."""
    table: dict[str, Any] = {}
    for key, out in results.items():
        if key.startswith("replicas_"):
            table[key] = {
                "concurrent_p95_to_bare_embed": out.get("concurrent_p95_to_bare_embed"),
                "concurrent_marks_p95_to_bare_embed": out.get("concurrent_marks_p95_to_bare_embed"),
                "single_p95_to_bare_embed": out.get("single_p95_to_bare_embed"),
                "concurrent_requests_per_s": out.get("concurrent_requests_per_s"),
                "cpu_ms_per_recall": out.get("cpu_ms_per_recall"),
                "freshness_under_load_p99_s": out.get("freshness_under_load", {}).get("p99"),
            }
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small sizes, to check the bench itself")
    parser.add_argument("--counts", default="1,2,3", help="replica counts to measure, in order (default 1,2,3)")
    args = parser.parse_args()
    plan = Plan.quick() if args.quick else Plan()
    results = run(plan, [int(c) for c in args.counts.split(",")])
    results["summary"] = summary(results)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "bench-replicas.json").write_text(json.dumps(results, indent=2, default=str))
    print(json.dumps(results["summary"], indent=2))


if __name__ == "__main__":
    main()
