"""A million memories: recall, memory, disk, index rebuild and restart on one large data dir.

    python -m tests.bench.scale [--memories 1000000] [--users 10000] [--seed bulk|pipeline]   (make bench-scale)

Seeding through the pipeline (recall_load.seed) stores about 390 memories/s,
so a million would take 43 minutes alone. The default `bulk` seed writes
the same rows the consolidator writes, with its own code: each candidate is
the envelope recall_load.seed puts on `memory.embedded`, made a record by
agents.consolidator.apply.records.new_record and written by
MemoryWriter.upsert, with the user's data key created as the consolidator
creates it (KeyStore.for_writing), several transactions at once, straight
into the stack's Postgres. No `memory.changes` event is published, so the
index sink sees nothing: the index is then built by the real
`memstream rebuild index` (stack stopped, as the embedded shard requires),
and that run is the rebuild-rate figure. `--seed pipeline` seeds through
the pipeline instead (the index sink builds the index; the rebuild runs
after it all the same, for its rate).

Then the stack starts again on that data dir (time to /readyz 200), and the
recall figures of `make bench` are measured over HTTP with the operator key,
on the real Postgres and the rebuilt index. Writes bench-results/bench-scale.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg

from agents.consolidator.apply.records import new_record
from schemas import EmbeddedCandidate
from services.archive.keys import KeyStore
from services.core.config import Settings
from services.stores.postgres import PgPool
from services.stores.postgres.memory_writes import MemoryWriter
from tests.bench import recall_load
from tests.bench.probe import anon_rss_mib, peak_rss_mib
from tests.bench.soak import memory_by_name, stack_processes
from tests.stack import ROOT, Stack, embedded_stack, stack_settings

RESULTS = Path("bench-results")
GIB_MIB = 1024.0
RSS_MAX_MIB = 4 * GIB_MIB
READY_MAX_S = 60.0
P95_TO_BARE_MAX = 12.0
BATCH = 500
WRITERS = 3


@dataclass(frozen=True)
class Plan:
    memories: int = 1_000_000
    users: int = 10_000
    seed: str = "bulk"
    clients: int = 8
    load_seconds: float = 30.0


def candidates(memories: int, users: int) -> Iterator[EmbeddedCandidate]:
    """recall_load.seed's candidates, in its order and with its vectors, as the consolidator reads them off
    `memory.embedded`."""
    for _, value in recall_load.seed_candidates(memories, users):
        yield EmbeddedCandidate.model_validate_json(value)


async def bulk_seed(settings: Settings, memories: int, users: int, out: dict[str, Any]) -> None:
    """The consolidator's ADD path for every candidate, in WRITERS transactions of BATCH rows at a time.

    Each writer owns a share of the users, as the consolidator's partitions do: two transactions writing
    one user's rows at once deadlock on that user's centroid row (the memory_centroids trigger).
    """
    pool = PgPool(settings.pg_dsn, WRITERS, pool_timeout=60.0)
    await pool.open()
    keys = KeyStore.from_settings(pool, settings)
    writer = MemoryWriter()
    queues: list[asyncio.Queue[list[EmbeddedCandidate]]] = [asyncio.Queue(maxsize=4) for _ in range(WRITERS)]
    written = 0
    started = time.perf_counter()

    async def route() -> None:
        pending: list[list[EmbeddedCandidate]] = [[] for _ in range(WRITERS)]
        for item in candidates(memories, users):
            w = zlib.crc32(item.candidate.user_id.encode()) % WRITERS
            pending[w].append(item)
            if len(pending[w]) >= BATCH:
                await queues[w].put(pending[w])
                pending[w] = []
        for queue, share in zip(queues, pending, strict=True):
            if share:
                await queue.put(share)
            await queue.put([])  # the end

    async def write(queue: asyncio.Queue[list[EmbeddedCandidate]]) -> None:
        nonlocal written
        while batch := await queue.get():
            now = datetime.now(UTC)
            async with pool.transaction("bench_bulk_seed") as conn:
                await keys.for_writing(conn, {(i.candidate.tenant_id, i.candidate.user_id) for i in batch})
                for item in batch:
                    await writer.upsert(conn, new_record(item, item.candidate.candidate_id, now), item.vector)
            written += len(batch)
            if written % 50_000 < len(batch):
                print(f"  bulk seed: {written} rows, {written / (time.perf_counter() - started):.0f}/s", flush=True)

    try:
        await asyncio.gather(route(), *(write(q) for q in queues))
    finally:
        await pool.close()
    out.update(method="bulk", rows=written, seconds=time.perf_counter() - started)
    out["memories_per_s"] = written / out["seconds"]
    vacuum_started = time.perf_counter()
    async with await psycopg.AsyncConnection.connect(settings.pg_dsn, autocommit=True) as conn:
        await conn.execute("VACUUM (ANALYZE) memories")
    out["vacuum_analyze_seconds"] = time.perf_counter() - vacuum_started


def active_memories(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT count(*) FROM memories WHERE status = 'active'").fetchone()
    return int(row[0]) if row else 0


def disk_bytes(path: Path) -> int:
    """Bytes allocated on disk under `path` (du's figure, not the files' apparent sizes)."""
    return sum(p.lstat().st_blocks * 512 for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def seed(stack: Stack, plan: Plan, out: dict[str, Any]) -> None:
    settings = stack_settings(stack)
    if plan.seed == "bulk":
        asyncio.run(bulk_seed(settings, plan.memories, plan.users, out))
        out["how"] = (
            "bulk: recall_load.seed's candidates written by the consolidator's own record and upsert code "
            "(new_record, MemoryWriter.upsert, KeyStore.for_writing) straight into Postgres; no memory.changes "
            "events; index built by `memstream rebuild index`"
        )
    else:
        asyncio.run(
            recall_load.seed(stack.base_url, stack.bootstrap, settings.pg_dsn, plan.memories, plan.users, 7200, out)
        )
        out["method"] = "pipeline"
        out["how"] = "pipeline: candidates on memory.embedded (recall_load.seed); consolidator and index sink as live"
    out["active_memories_in_postgres"] = active_memories(settings.pg_dsn)


def rebuild_index(env: dict[str, str], memories: int, out: dict[str, Any]) -> None:
    """`memstream rebuild index` as an operator runs it on the stopped stack (it starts Postgres for itself).

    Its own peak RSS is sampled too: the command is not part of the running
    stack, yet an operator needs a machine that can hold it (at 1,000,000
    memories it is the largest process of all).
    """
    started = time.perf_counter()
    with subprocess.Popen(
        [sys.executable, "-m", "services.cli", "rebuild", "index"],
        cwd=ROOT,
        env=dict(env),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    ) as proc:
        peak: list[float] = []
        anon: list[float] = [0.0]

        def sample() -> None:
            while proc.poll() is None:
                mib = peak_rss_mib(proc.pid)  # VmHWM only grows: the last read is the peak, to within 1 s
                if mib is not None:
                    peak[:] = [mib]
                anon[0] = max(anon[0], anon_rss_mib(proc.pid) or 0.0)  # sampled: within 1 s of its peak
                time.sleep(1.0)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        output, _ = proc.communicate(timeout=7200)
        sampler.join()
    out.update(seconds=time.perf_counter() - started, exit_code=proc.returncode, memories=memories)
    out["memories_per_s"] = memories / out["seconds"]
    out["peak_rss_mib"] = peak[0] if peak else None
    # Most of a rebuild's RSS is the shard's mapped segment files, which the kernel can evict (docs/benchmarks.md).
    out["peak_rss_anon_mib"] = anon[0] or None
    out["output_tail"] = output.strip().splitlines()[-3:]


async def measure(stack: Stack, plan: Plan, out: dict[str, Any]) -> None:
    figures: dict[str, Any] = {}
    await recall_load.recall_figures(
        stack.base_url, plan.users, plan.clients, plan.load_seconds, figures, headers=stack.headers
    )
    out["recall_load"] = figures


def goals(results: dict[str, Any]) -> dict[str, dict[str, Any]]:
    recall = results.get("recall_load", {})
    # Both 8-client runs: the read path alone, and with access marks (the stage's plain p95).
    ratios = [recall.get("concurrent_p95_to_bare_embed"), recall.get("concurrent_marks_p95_to_bare_embed")]
    ratio = None if None in ratios else max(r for r in ratios if r is not None)
    peaks = dict(results.get("peak_rss_mib_while_seeding", {}))
    for name, mib in results.get("peak_rss_mib", {}).items():
        peaks[name] = max(mib, peaks.get(name, 0.0))
    rebuild = results.get("index_rebuild", {}).get("peak_rss_mib")
    if rebuild is not None:  # an operator's command on this data, so it counts as one of its processes
        peaks["memstream rebuild index"] = rebuild
    worst = max(peaks.items(), key=lambda kv: kv[1] or 0.0, default=("-", None))
    ready = results.get("restart", {}).get("ready_seconds")
    return {
        "recall_p95": {
            "pass": ratio is not None and ratio <= P95_TO_BARE_MAX,
            "clients": results["plan"]["clients"],
            "worst_p95_to_bare_embed": ratio,
            "read_path_p95_to_bare_embed": ratios[0],
            "marks_p95_to_bare_embed": ratios[1],
        },
        "peak_rss": {"pass": bool(peaks) and (worst[1] or 0.0) <= RSS_MAX_MIB, "worst": worst[0], "mib": worst[1]},
        "ready": {"pass": ready is not None and ready <= READY_MAX_S, "seconds": ready},
    }


def run(plan: Plan) -> dict[str, Any]:
    results: dict[str, Any] = {"plan": asdict(plan)}
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = Path(tmp) / "stack"
        with embedded_stack(data_dir) as stack:
            results["seed"] = {}
            seed(stack, plan, results["seed"])
            env = stack.env
            results["peak_rss_mib_while_seeding"] = memory_by_name(stack_processes(stack), peak_rss_mib, max)
        print(f"  seed: {results['seed']}", flush=True)
        results["index_rebuild"] = {}
        rebuild_index(env, results["seed"]["active_memories_in_postgres"], results["index_rebuild"])
        print(f"  index rebuild: {results['index_rebuild']}", flush=True)
        started = time.perf_counter()
        with embedded_stack(data_dir) as stack:
            results["restart"] = {"ready_seconds": time.perf_counter() - started}
            print(f"  ready after {results['restart']['ready_seconds']:.1f} s", flush=True)
            asyncio.run(measure(stack, plan, results))
            results["peak_rss_mib"] = memory_by_name(stack_processes(stack), peak_rss_mib, max)
        results["disk_bytes"] = {"postgres": disk_bytes(data_dir / "pg"), "index": disk_bytes(data_dir / "qdrant")}
    results["goals"] = goals(results)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--memories", type=int, default=1_000_000)
    parser.add_argument("--users", type=int, default=10_000)
    parser.add_argument("--seed", choices=["bulk", "pipeline"], default="bulk", help="how the memories get in")
    parser.add_argument("--load-seconds", type=float, default=30.0, help="length of the recall runs (as make bench)")
    args = parser.parse_args()
    plan = Plan(memories=args.memories, users=args.users, seed=args.seed, load_seconds=args.load_seconds)
    results = run(plan)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "bench-scale.json").write_text(json.dumps(results, indent=2, default=str))
    for name, goal in results["goals"].items():
        print(f"{'PASS' if goal['pass'] else 'FAIL'} {name}: { {k: v for k, v in goal.items() if k != 'pass'} }")


if __name__ == "__main__":
    main()
