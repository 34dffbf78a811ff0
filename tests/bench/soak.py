"""An hour of life: steady turns and recalls on one embedded stack, watched minute by minute.

    python -m tests.bench.soak [--minutes 60] [--replicas N] [--seed 10000]   (make bench-soak)

The whole run offers 20 user turns/s (pipeline.freshness, one 60 s call per
minute back to back: it produces the turns and times every 4th from produce
until recallable over HTTP) while 4 clients recall without pause, access
marks on, as an assistant would (recall_load.load, in 10 s chunks so each
minute gets its own error count). The recall clients ask about a store seeded
first through the pipeline (recall_load.seed). Every minute: the RSS of
every process of the stack, freshness p50/p99, consumer lag by topic (each
stage's input), and errors (recall non-200s, probe misses, new DLQ entries,
stage errors). At the end every produced turn's code word is looked for in
its user's memories in Postgres: a turn found in none is lost.
Writes bench-results/bench-soak.json and bench-results/bench-soak.png.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import operator
import re
import shutil
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import suppress
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx
import psycopg

from tests.bench import pipeline, recall_load
from tests.bench.probe import percentiles, scrape, wait_drained
from tests.stack import Stack, embedded_stack, postgres_pids, stack_settings

RESULTS = Path("bench-results")
RSS_GROWTH_MAX = 0.05
FRESHNESS_P99_MAX_S = 1.0
RECALL_CHUNK_S = 10.0
TOKEN = re.compile(r"zq([0-9a-f]{6})x(\d+)")
# Each freshness call spreads its turns over this many users (pipeline.freshness: fresh-{i % users}-{run}).
FRESHNESS_USERS = 200


@dataclass(frozen=True)
class Plan:
    minutes: int = 60
    replicas: int = 0
    turns_per_s: float = 20.0
    probe_every: int = 4
    recall_clients: int = 4
    seed_memories: int = 10_000
    seed_users: int = 200


# --- pure parts (tests/unit/test_bench_soak.py) ---


def process_name(parent: str, cmdline: str) -> str:
    """A stable name for a child of a stack process: Postgres backends are summed, aux processes keep their title.

    Client backends are titled "postgres: <user> <db> <host>(<port>) <state>"
    and come and go with connections, so only their sum is comparable minute
    to minute.
    """
    title = cmdline.replace("\0", " ").strip()
    if title.startswith("postgres: "):
        rest = title.removeprefix("postgres: ")
        return f"{parent}/backends" if "(" in rest or rest.startswith("memstream ") else f"{parent}/{rest}"
    return f"{parent}/{Path(title.split(' ', 1)[0]).name or 'child'}"


def growth_window(minutes: int) -> int:
    """How many of the last minutes RSS growth is judged over: 40 of an hour, else the last two thirds."""
    return 40 if minutes >= 60 else max(1, round(minutes * 2 / 3))


def rss_growth(series: Sequence[Mapping[str, float]], window: int) -> dict[str, float]:
    """Per process, (RSS at the end - RSS `window` minutes before) / the latter; processes missing at either end
    are left out (a restarted process shows under the same name, so a restart is visible as a jump)."""
    if len(series) < 2:
        return {}  # one minute shows no growth: not measured
    start, end = series[max(0, len(series) - 1 - window)], series[-1]
    return {name: (end[name] - start[name]) / start[name] for name in end if start.get(name)}


def lag_by_topic(samples: Iterable[tuple[Mapping[str, str], float]]) -> dict[str, float]:
    """memstream_consumer_lag_messages summed over partitions: one figure per stage's input topic."""
    out: dict[str, float] = defaultdict(float)
    for labels, value in samples:
        out[labels.get("topic", "?")] += value
    return dict(out)


def counter_total(samples: Iterable[tuple[Mapping[str, str], float]]) -> float:
    return sum(value for _, value in samples)


def expected_turns(tokens: Iterable[str], count: int) -> dict[str, str]:
    """Every turn one freshness call produced, token -> user, from any of its probes' tokens (they share the run).

    freshness produces `count` turns, turn i with code word zq{run}x{i}, for user fresh-{i % 50}-{run}.
    """
    runs = {m.group(1) for t in tokens if (m := TOKEN.fullmatch(t))}
    return {f"zq{run}x{i}": f"fresh-{i % FRESHNESS_USERS}-{run}" for run in runs for i in range(count)}


def lost_turns(expected: Mapping[str, str], texts_by_user: Mapping[str, Iterable[str]]) -> list[str]:
    """The tokens found in no memory of their own user."""
    found: set[str] = set()
    for user, texts in texts_by_user.items():
        for text in texts:
            found.update(m.group(0) for m in TOKEN.finditer(text) if expected.get(m.group(0)) == user)
    return sorted(set(expected) - found)


def minute_errors(minute: Mapping[str, Any]) -> float:
    """Every kind of error a minute counted (recall non-200s, probe misses, new DLQ entries, stage errors,
    a freshness call ended by a broken connection, processes the supervisor restarted)."""
    return float(sum(minute["errors"].values()))


def goals(minutes: Sequence[Mapping[str, Any]], lost: int | None, planned: int) -> dict[str, dict[str, Any]]:
    """The soak's four goals, each {"pass": bool, ...figures}."""
    window = growth_window(planned)
    growth = rss_growth([m["rss_mib"] for m in minutes], window)
    worst = max(growth.items(), key=lambda kv: kv[1], default=("-", 0.0))
    p99s = [m["freshness"].get("p99") for m in minutes]
    fresh_ok = bool(minutes) and all(p is not None and p <= FRESHNESS_P99_MAX_S for p in p99s)
    errors = sum(minute_errors(m) for m in minutes)
    return {
        "rss_growth": {
            "pass": bool(growth) and worst[1] <= RSS_GROWTH_MAX,
            "window_minutes": window,
            "worst_process": worst[0],
            "worst_growth": worst[1],
            "by_process": growth,
        },
        "freshness_p99": {"pass": fresh_ok, "max_s": max((p for p in p99s if p is not None), default=None)},
        "errors": {"pass": bool(minutes) and errors == 0, "total": errors},
        "lost": {"pass": lost == 0, "turns": lost},
    }


# --- watching the stack ---


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def rss_mib(pid: int) -> float | None:
    for line in (_read(Path(f"/proc/{pid}/status")) or "").splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return None


def stack_processes(stack: Stack) -> dict[int, str]:
    """pid -> name for every process of the stack: `memstream up` and all it started, found from /proc.

    Names come from the supervisor's run/*.pid files (app, workers, replicas), the postmaster from
    pg/postmaster.pid and its children by their titles (process_name), anything else (the broker, the
    s3 store) from its command line (command_name).
    """
    named: dict[int, str] = {}
    for pidfile in sorted((stack.data_dir / "run").glob("*.pid")):
        text = (_read(pidfile) or "").strip()
        if text.isdigit():
            named[int(text)] = pidfile.stem
    with suppress(OSError, ValueError, IndexError):
        named[postgres_pids(stack)[0]] = "postgres"
    parents = parent_pids()
    found = {stack.proc.pid: "up"}
    for pid in descendants(stack.proc.pid, parents):  # parents come before their children
        cmdline = _read(Path(f"/proc/{pid}/cmdline"))
        if cmdline is None:
            continue  # exited meanwhile
        parent = found.get(parents[pid], "")
        if pid in named:
            found[pid] = named[pid]
        elif parent == "postgres":
            found[pid] = process_name(parent, cmdline)
        else:
            found[pid] = command_name(cmdline)
    return found


def parent_pids() -> dict[int, int]:
    """pid -> parent pid of every process now (from /proc/PID/stat)."""
    out: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        text = _read(stat)
        if text:
            # The command name (field 2) is in parentheses and may hold spaces: split after it.
            out[int(stat.parent.name)] = int(text.rpartition(")")[2].split()[1])
    return out


def descendants(root: int, parents: Mapping[int, int]) -> list[int]:
    """Every process below `root`, breadth first."""
    children: dict[int, list[int]] = defaultdict(list)
    for pid, parent in parents.items():
        children[parent].append(pid)
    out: list[int] = []
    level = sorted(children[root])
    while level:
        out.extend(level)
        level = [c for pid in level for c in sorted(children[pid])]
    return out


def command_name(cmdline: str) -> str:
    """A short stable name from a command line: `-m module` for Python, else the program's name without
    a version suffix (tansu-v0.6.0-510f3e2 -> tansu)."""
    argv = [a for a in cmdline.split("\0") if a]
    if not argv:
        return "?"
    if "-m" in argv[:-1]:
        return argv[argv.index("-m") + 1]
    return re.split(r"-v\d", Path(argv[0]).name)[0]


def memory_by_name(
    processes: Mapping[int, str],
    read: Callable[[int], float | None] = rss_mib,
    combine: Callable[[float, float], float] = operator.add,
) -> dict[str, float]:
    """`read(pid)` (MiB) by name, `combine`d where a name has several processes (summed by default: Postgres
    backends); processes gone meanwhile count nothing."""
    out: dict[str, float] = {}
    for pid, name in processes.items():
        value = read(pid)
        if value is not None:
            out[name] = combine(out[name], value) if name in out else value
    return out


def restarts(stack: Stack) -> int:
    """Processes the supervisor has restarted so far (its "exited with" lines in up.log)."""
    return (stack.data_dir / "up.log").read_text(errors="replace").count(" exited with ")


async def stage_counters(client: httpx.AsyncClient) -> dict[str, Any]:
    return {
        "lag": lag_by_topic(await scrape(client, "memstream_consumer_lag_messages")),
        "dlq": counter_total(await scrape(client, "memstream_dlq_messages_total")),
        "stage_errors": counter_total(await scrape(client, "memstream_stage_errors_total")),
    }


class RecallClients:
    """`clients` clients recalling without pause, in RECALL_CHUNK_S chunks; `take()` returns and clears the
    chunks finished since the last call."""

    def __init__(self, stack: Stack, plan: Plan) -> None:
        self._stack, self._plan = stack, plan
        self._done: list[dict[str, Any]] = []
        self._stop = asyncio.Event()

    async def run(self) -> None:
        while not self._stop.is_set():
            chunk: dict[str, Any] = {}
            try:
                await recall_load.load(
                    self._stack.base_url,
                    self._plan.seed_users,
                    self._plan.recall_clients,
                    RECALL_CHUNK_S,
                    chunk,
                    headers=self._stack.headers,
                    record_access=True,
                )
            except (httpx.HTTPError, OSError):  # a broken connection ends the chunk: one error, go on
                chunk = {"requests": 0, "errors": 1}
            self._done.append(chunk)

    def stop(self) -> None:
        self._stop.set()

    def take(self) -> dict[str, Any]:
        chunks, self._done = self._done, []
        requests = sum(c["requests"] for c in chunks)
        return {
            "requests": requests,
            "errors": sum(c["errors"] for c in chunks),
            "p95_ms_worst_chunk": max((c.get("p95", 0.0) * 1000 for c in chunks), default=None),
        }


async def soak(stack: Stack, plan: Plan, results: dict[str, Any]) -> None:
    settings = stack_settings(stack)
    url, headers = stack.base_url, stack.headers
    metrics = stack.stages_url
    seed: dict[str, Any] = {}
    await recall_load.seed(metrics, stack.bootstrap, settings.pg_dsn, plan.seed_memories, plan.seed_users, 900, seed)
    results["seed"] = seed
    print(f"  seed: {seed}", flush=True)
    minutes: list[dict[str, Any]] = results["minutes"]
    tokens: list[str] = []
    async with httpx.AsyncClient(base_url=metrics, timeout=30) as scraper:
        last = await stage_counters(scraper)
        restarted = restarts(stack)
        recalls = RecallClients(stack, plan)
        recalling = asyncio.create_task(recalls.run())
        started = time.perf_counter()
        try:
            for minute in range(1, plan.minutes + 1):
                fresh: dict[str, Any] = {}
                timeline: list[dict[str, Any]] = []
                failed = None
                try:
                    await pipeline.freshness(
                        settings,
                        url,
                        plan.turns_per_s,
                        60.0,
                        fresh,
                        plan.probe_every,
                        users=FRESHNESS_USERS,
                        headers=headers,
                        timeline=timeline,
                    )
                except (httpx.HTTPError, OSError) as exc:  # one probe's broken connection ends that call, not the run
                    failed = f"{type(exc).__name__}: {exc}"
                tokens.extend(t["token"] for t in timeline[:1])
                now = await stage_counters(scraper)
                recall = recalls.take()
                row = {
                    "minute": minute,
                    "at_s": time.perf_counter() - started,
                    "rss_mib": memory_by_name(stack_processes(stack)),
                    "freshness": {k: fresh.get(k) for k in ("n", "misses", "p50", "p99", "offered_turns_per_s")},
                    # Where the time went: produce -> on memory.changes (the stages), then -> recalled (index, read).
                    "to_change": percentiles([t["change"] for t in timeline if "change" in t], (50, 99)),
                    "change_to_recall": percentiles(
                        [t["recalled"] - t["change"] for t in timeline if "recalled" in t and "change" in t], (50, 99)
                    ),
                    "lag": now["lag"],
                    "recall": recall,
                    "errors": {
                        "recall_non_200": recall["errors"],
                        "probe_misses": fresh.get("misses", 0),
                        "dlq_new": now["dlq"] - last["dlq"],
                        "stage_errors_new": now["stage_errors"] - last["stage_errors"],
                        "freshness_failed": int(failed is not None),
                        "restarts_new": restarts(stack) - restarted,
                    },
                }
                if failed:
                    row["freshness_error"] = failed
                restarted += row["errors"]["restarts_new"]
                last = now
                minutes.append(row)
                print(
                    f"  minute {minute}: freshness p50 {fresh.get('p50')} p99 {fresh.get('p99')}, "
                    f"(to memory.changes {row['to_change']}, then to recalled {row['change_to_recall']}), "
                    f"errors {row['errors']}, lag {sum(now['lag'].values()):.0f}",
                    flush=True,
                )
        finally:
            recalls.stop()
            await recalling
        results["drained_after_run"] = await wait_drained(scraper, 300)
    per_call = int(plan.turns_per_s * 60.0)
    expected = expected_turns(tokens, per_call)
    results["turns_produced"] = len(expected)
    results["freshness_calls_identified"] = len(tokens)
    results["lost_tokens"] = await lost(settings.pg_dsn, expected)
    if len(tokens) < len(minutes):  # a call whose turns cannot be named cannot be checked: count them all lost
        results["lost_tokens"].extend(["<unnamed call>"] * per_call * (len(minutes) - len(tokens)))


async def lost(dsn: str, expected: Mapping[str, str]) -> list[str]:
    """The expected tokens in no memory (any status) of their user, from Postgres directly."""
    users = sorted(set(expected.values()))
    texts: dict[str, list[str]] = defaultdict(list)
    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        cur = await conn.execute(
            "SELECT user_id, text FROM memories WHERE tenant_id = %s AND user_id = ANY(%s)", (pipeline.TENANT, users)
        )
        for user, text in await cur.fetchall():
            texts[user].append(text)
    return lost_turns(expected, texts)


def plot(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    minutes = results["minutes"]
    xs = [m["minute"] for m in minutes]
    fig, axes = plt.subplots(4, 1, figsize=(10, 14), sharex=True)
    rss, fresh, lag, errors = axes
    for name in sorted({n for m in minutes for n in m["rss_mib"]}):
        rss.plot(xs, [m["rss_mib"].get(name) for m in minutes], label=name)
    rss.set_yscale("log")  # 5 MiB helpers beside a 1 GiB app: growth shows as slope on every line
    rss.set_ylabel("RSS (MiB, log)")
    rss.legend(fontsize="x-small", ncol=3)
    for key in ("p50", "p99"):
        fresh.plot(xs, [m["freshness"].get(key) for m in minutes], marker=".", label=f"freshness {key}")
    fresh.axhline(FRESHNESS_P99_MAX_S, color="red", linestyle=":", label="p99 goal")
    fresh.set_ylabel("seconds")
    fresh.legend(fontsize="small")
    for topic in sorted({t for m in minutes for t in m["lag"]}):
        lag.plot(xs, [m["lag"].get(topic, 0) for m in minutes], label=topic)
    lag.set_ylabel("consumer lag (messages)")
    lag.legend(fontsize="x-small")
    for key in sorted({k for m in minutes for k in m["errors"]}):
        errors.plot(xs, [m["errors"].get(key, 0) for m in minutes], marker=".", label=key)
    errors.set_ylabel("errors per minute")
    errors.set_xlabel("minute")
    errors.xaxis.set_major_locator(MaxNLocator(integer=True))
    errors.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def run(plan: Plan) -> dict[str, Any]:
    results: dict[str, Any] = {"plan": asdict(plan), "minutes": []}
    extra = {"MEMSTREAM_READ_REPLICAS": str(plan.replicas)} if plan.replicas else {}
    with tempfile.TemporaryDirectory() as tmp, embedded_stack(Path(tmp) / "stack", extra) as stack:
        try:
            asyncio.run(soak(stack, plan, results))
        finally:
            RESULTS.mkdir(exist_ok=True)
            shutil.copyfile(stack.data_dir / "up.log", RESULTS / "bench-soak-up.log")  # the temp dir goes with the run
            lost_tokens = results.get("lost_tokens")
            results["lost"] = None if lost_tokens is None else len(lost_tokens)
            results["lost_examples"] = (lost_tokens or [])[:20]
            results.pop("lost_tokens", None)
            results["goals"] = goals(results["minutes"], results["lost"], plan.minutes)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=int, default=60)
    parser.add_argument("--replicas", type=int, default=0, help="read replicas (MEMSTREAM_READ_REPLICAS)")
    parser.add_argument("--seed", type=int, default=10_000, help="memories seeded first for the recall clients")
    args = parser.parse_args()
    results = run(Plan(minutes=args.minutes, replicas=args.replicas, seed_memories=args.seed))
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "bench-soak.json").write_text(json.dumps(results, indent=2, default=str))
    plot(results, RESULTS / "bench-soak.png")
    for name, goal in results["goals"].items():
        figures = {k: v for k, v in goal.items() if k not in ("pass", "by_process")}
        print(f"{'PASS' if goal['pass'] else 'FAIL'} {name}: {figures}")


if __name__ == "__main__":
    main()
