"""Starting and talking to a real embedded stack from tests and benchmarks."""

from __future__ import annotations

import dataclasses
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

import httpx
import orjson

from services.core.config import Settings

ROOT = Path(__file__).resolve().parent.parent
FAULT_RESULTS = ROOT / "bench-results" / "fault-tests.jsonl"
T = TypeVar("T")


def user_path(user: str) -> str:
    """A user id as one path segment: every reserved character escaped, dots too.

    Dots matter because clients (httpx included) collapse a `.` or `..`
    segment before sending; `%2E` survives that and the server decodes it.
    """
    return quote(user, safe="").replace(".", "%2E")


def run_cli(
    env: Mapping[str, str], *args: str, stdin: str | None = None, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    """`memstream ARGS` as a user runs it: its own process, from the checkout, with `env` (a stack's, say)."""
    return subprocess.run(
        [sys.executable, "-m", "services.cli", *args],
        cwd=ROOT,
        env=dict(env),
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@dataclass
class Stack:
    env: dict[str, str]
    data_dir: Path
    base_url: str
    bootstrap: str
    proc: subprocess.Popen[bytes]

    def app_pid(self) -> int:
        return int((self.data_dir / "run" / "app.pid").read_text())

    def worker_pid(self, number: int) -> int:
        """Worker `number` (1-based) of a stack started with MEMSTREAM_WORKERS > 1; a restart rewrites it."""
        return int((self.data_dir / "run" / f"worker-{number}.pid").read_text())

    def worker_metrics_url(self, number: int) -> str:
        """Where worker `number` serves its metrics (the read service's process serves its own on /metrics)."""
        return f"http://127.0.0.1:{int(self.env['MEMSTREAM_WORKER_METRICS_PORT']) + number - 1}/metrics"

    @property
    def stages_url(self) -> str:
        """Where the process running the stages serves its metrics: with read replicas it has no HTTP API."""
        if int(self.env.get("MEMSTREAM_READ_REPLICAS", "0") or 0):
            return f"http://127.0.0.1:{self.env['MEMSTREAM_WORKER_METRICS_PORT']}"
        return self.base_url

    def partitions_held(self, number: int | None = None) -> dict[str, int]:
        """Partitions worker `number` (None: the read service's process) holds, by stage."""
        if number is None:
            return assigned_partitions(self.request("GET", "/metrics", timeout=5).text)
        return assigned_partitions(httpx.get(self.worker_metrics_url(number), timeout=5).text)

    @property
    def api_key(self) -> str:
        """The operator key `memstream up` created in the data dir (every tenant, admin)."""
        return (self.data_dir / "api-key").read_text().strip()

    @property
    def headers(self) -> dict[str, str]:
        return {"authorization": f"Bearer {self.api_key}"}

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """Any request, with the operator key unless `headers` says otherwise."""
        kwargs.setdefault("headers", self.headers)
        kwargs.setdefault("timeout", 30)
        return httpx.request(method, f"{self.base_url}{path}", **kwargs)

    def post(self, path: str, body: dict[str, Any]) -> httpx.Response:
        return self.request("POST", path, json=body)

    def get(self, path: str, **params: Any) -> httpx.Response:
        return self.request("GET", path, params=params)

    def recall(self, tenant: str, user: str, query: str, **extra: Any) -> dict[str, Any]:
        response = self.post("/v1/recall", {"tenant_id": tenant, "user_id": user, "query": query, **extra})
        response.raise_for_status()
        data: dict[str, Any] = response.json()
        return data

    def memories(self, tenant: str, user: str, **params: Any) -> list[dict[str, Any]]:
        response = self.get(f"/v1/users/{user_path(user)}/memories", tenant_id=tenant, limit=1000, **params)
        response.raise_for_status()
        found: list[dict[str, Any]] = response.json()["memories"]
        return found


def assigned_partitions(metrics_text: str) -> dict[str, int]:
    """A process's memstream_assigned_partitions gauge, by stage: how its stages' partitions spread."""
    from prometheus_client.parser import text_string_to_metric_families

    return {
        sample.labels["stage"]: int(sample.value)
        for family in text_string_to_metric_families(metrics_text)
        if family.name == "memstream_assigned_partitions"
        for sample in family.samples
    }


def wait_for(probe: Callable[[], T | None], timeout: float, what: str, interval: float = 0.1) -> T:
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = probe()
            if value:
                return value
        except (httpx.HTTPError, OSError, ValueError) as exc:
            last = exc
        time.sleep(interval)
    raise TimeoutError(f"{what} not reached within {timeout}s (last error: {last})")


def settle(probe: Callable[[], bool], timeout: float, interval: float = 1.0) -> float | None:
    """Seconds until `probe` holds, or None if it never did: the caller reports figures either way.

    Unlike wait_for, missing the deadline is not an exception, so a fault test
    can still count what was lost before it asserts.
    """
    started = time.monotonic()
    while True:
        try:
            if probe():
                return time.monotonic() - started
        except (httpx.HTTPError, OSError, ValueError):
            pass  # a store or the read service still recovering
        if time.monotonic() - started >= timeout:
            return None
        time.sleep(interval)


def _ready(proc: subprocess.Popen[bytes], base_url: str) -> bool:
    if proc.poll() is not None:
        raise RuntimeError(f"memstream up exited with {proc.returncode}")
    return httpx.get(f"{base_url}/readyz", timeout=5).status_code == 200


def free_ports(count: int = 1) -> list[int]:
    """`count` consecutive loopback ports the OS reports free right now (the first one is its pick for port 0).

    Consecutive because a stack's workers serve metrics on worker_metrics_port + i - 1.
    All are held while checking, so no two callers' blocks overlap within this process.
    """
    while True:
        with ExitStack() as held:
            first = held.enter_context(socket.socket())
            first.bind(("127.0.0.1", 0))
            start = int(first.getsockname()[1])
            try:
                for port in range(start + 1, start + count):
                    held.enter_context(socket.socket()).bind(("127.0.0.1", port))
            except OSError:
                continue  # one of the next ports is taken: ask again
            return list(range(start, start + count))


@dataclass(frozen=True)
class StackPorts:
    """Where a stack listens; worker i (1-based) serves metrics on worker_metrics + i - 1."""

    kafka: int
    http: int
    pg: int
    worker_metrics: int

    @classmethod
    def of(cls, data_dir: Path, workers: int) -> StackPorts:
        """The ports a stack on `data_dir` used before (a restart keeps its addresses), else free ones."""
        saved = data_dir / "test-ports.json"
        if saved.is_file():
            return cls(**orjson.loads(saved.read_bytes()))
        kafka, http, pg, worker_metrics, *_ = free_ports(3 + workers)  # one block: no two alike
        ports = cls(kafka, http, pg, worker_metrics)
        saved.write_bytes(orjson.dumps(dataclasses.asdict(ports)))
        return ports


@contextmanager
def embedded_stack(data_dir: Path, extra_env: dict[str, str] | None = None) -> Iterator[Stack]:
    """`memstream up` on `data_dir`, on free ports; started again on the same data dir, on the same ports."""
    data_dir.mkdir(parents=True, exist_ok=True)
    extra_env = extra_env or {}
    ports = StackPorts.of(data_dir, int(extra_env.get("MEMSTREAM_WORKERS", "1")))
    kafka = f"127.0.0.1:{ports.kafka}"
    env = {
        **os.environ,
        "MEMSTREAM_DATA_DIR": str(data_dir),
        "MEMSTREAM_TOPICS_FILE": str(ROOT / "topics.yaml"),
        "MEMSTREAM_KAFKA_BOOTSTRAP": kafka,
        "MEMSTREAM_PG_DSN": f"postgresql://memstream@127.0.0.1:{ports.pg}/memstream",
        "MEMSTREAM_HTTP_PORT": str(ports.http),
        "MEMSTREAM_WORKER_METRICS_PORT": str(ports.worker_metrics),
        "MEMSTREAM_LOG_LEVEL": "info",
        **extra_env,
    }
    log = open(data_dir / "up.log", "ab")  # noqa: SIM115
    proc = subprocess.Popen(
        [sys.executable, "-m", "services.cli", "up"], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT
    )
    stack = Stack(env, data_dir, f"http://127.0.0.1:{ports.http}", kafka, proc)
    try:
        wait_for(lambda: _ready(proc, stack.base_url), 240, "stack /readyz", interval=0.5)
        yield stack
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def stack_settings(stack: Stack) -> Settings:
    """The Settings the stack's processes run with: built from the same environment they were given."""
    saved = dict(os.environ)
    try:
        os.environ.clear()
        os.environ.update(stack.env)
        return Settings()
    finally:
        os.environ.clear()
        os.environ.update(saved)


def turn(
    tenant: str,
    user: str,
    session: str,
    index: int,
    content: str,
    role: str = "user",
    ts: datetime | None = None,
    **metadata: Any,
) -> dict[str, Any]:
    when = ts or datetime.now(UTC)
    return {
        "event_id": f"{session}-{index}-{uuid.uuid4().hex[:8]}",
        "tenant_id": tenant,
        "user_id": user,
        "session_id": session,
        "turn_index": index,
        "role": role,
        "content": content,
        "ts": when.isoformat(),
        "metadata": metadata,
    }


def session_end(tenant: str, user: str, session: str, ts: datetime | None = None) -> dict[str, Any]:
    return {
        "type": "session_end",
        "event_id": f"{session}-end",
        "tenant_id": tenant,
        "user_id": user,
        "session_id": session,
        "ts": (ts or datetime.now(UTC) + timedelta(seconds=1)).isoformat(),
    }


async def produce(bootstrap: str, events: list[dict[str, Any]] | list[bytes]) -> None:
    from services.kafka.producer import TurnProducer

    raw = [e if isinstance(e, bytes) else orjson.dumps(e) for e in events]
    async with TurnProducer(bootstrap) as producer:
        await producer.send_raw(raw)


async def produce_records(
    bootstrap: str, records: Sequence[tuple[bytes | None, bytes | None]], topic: str = "chat.turns"
) -> list[tuple[int, int]]:
    """Send (key, value) pairs as they are; returns each one's (partition, offset).

    The offsets are what a DLQ entry's `x-memstream-source-*` headers point
    back to, so a test can match every dead letter to the exact message sent,
    even when the value (empty, a bare number, garbage) could carry no marker.
    """
    from aiokafka import AIOKafkaProducer

    # Room for ~1 MB hostile values; no idempotence (the embedded broker rejects it).
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5, max_request_size=2 * 1024 * 1024)
    await producer.start()
    try:
        pending = [await producer.send(topic, key=key, value=value) for key, value in records]
        return [(meta.partition, meta.offset) for meta in [await fut for fut in pending]]
    finally:
        await producer.stop()


@dataclass(frozen=True)
class DeadLetter:
    """One memory.dlq message, headers decoded to bytes by name."""

    key: bytes | None
    value: bytes | None
    headers: dict[str, bytes]
    offset: int

    def header(self, name: str) -> str:
        return self.headers[f"x-memstream-{name}"].decode()

    @property
    def reason(self) -> str:
        return self.header("reason")

    @property
    def source(self) -> tuple[str, int, int]:
        """(topic, partition, offset) of the message that was dead-lettered."""
        return self.header("source-topic"), int(self.header("source-partition")), int(self.header("source-offset"))


async def read_dlq(bootstrap: str, *, at_least: int = 0, quiet: float = 2.0, within: float = 60.0) -> list[DeadLetter]:
    """Every memory.dlq message so far: waits for `at_least`, then until nothing new arrives for `quiet` seconds.

    Reading past `at_least` is what lets a test see a duplicate or an
    unexpected entry instead of stopping at the count it hoped for.
    """
    from aiokafka import AIOKafkaConsumer

    consumer = AIOKafkaConsumer(
        "memory.dlq",
        bootstrap_servers=bootstrap,
        group_id=f"test-{uuid.uuid4().hex}",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        max_partition_fetch_bytes=4 * 1024 * 1024,
    )
    await consumer.start()
    try:
        found: list[DeadLetter] = []
        deadline = time.monotonic() + within
        last_new = time.monotonic()
        while time.monotonic() < deadline:
            batch = await consumer.getmany(timeout_ms=500)
            fresh = [
                DeadLetter(m.key, m.value, {k: bytes(v) for k, v in m.headers}, m.offset)
                for msgs in batch.values()
                for m in msgs
            ]
            if fresh:
                found.extend(fresh)
                last_new = time.monotonic()
            elif len(found) >= at_least and time.monotonic() - last_new >= quiet:
                break
        return found
    finally:
        await consumer.stop()


async def opened_dlq(stack: Stack, entries: list[DeadLetter]) -> list[DeadLetter]:
    """The entries with each sealed value opened with its user's key, as `memstream dlq` shows them.

    A forgotten user's entry keeps its sealed bytes (nothing opens them).
    """
    from services.archive.dlq import OPENED, open_entries
    from services.archive.keys import KeyStore
    from services.stores.postgres import PgPool

    settings = stack_settings(stack)
    pool = PgPool(settings.pg_dsn, 2)
    await pool.open()
    try:
        found = await open_entries(KeyStore.from_settings(pool, settings), [(e.value, e.headers) for e in entries])
    finally:
        await pool.close()
    return [
        dataclasses.replace(e, value=o.value) if o.state == OPENED else e for e, o in zip(entries, found, strict=True)
    ]


def postgres_pids(stack: Stack) -> list[int]:
    """The postmaster (first line of postmaster.pid) and every process it forked.

    Each backend calls setsid(), so the postmaster's process group holds the
    postmaster alone: pausing "Postgres" means signalling every one of them.
    """
    postmaster = int((stack.data_dir / "pg" / "postmaster.pid").read_text().splitlines()[0])
    children = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            # The command name (field 2) is in parentheses and may hold spaces: split after it.
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:
            continue  # exited meanwhile
        if int(fields[1]) == postmaster:
            children.append(int(stat.parent.name))
    return [postmaster, *children]


@contextmanager
def postgres_paused(stack: Stack) -> Iterator[list[int]]:
    """SIGSTOP the whole Postgres server (a hung host, a long GC-like stall), SIGCONT on the way out, always.

    The postmaster is stopped first so it forks nothing new, then the
    children listed after that; every one is continued even if the body fails.
    """
    postmaster = postgres_pids(stack)[0]
    if postmaster in (os.getpid(), os.getppid()):
        raise RuntimeError(f"refusing to stop pid {postmaster}: not a Postgres server of this stack")
    stopped = [postmaster]
    try:
        os.kill(postmaster, signal.SIGSTOP)
        for pid in postgres_pids(stack)[1:]:
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)
                stopped.append(pid)
        yield stopped
    finally:
        for pid in reversed(stopped):
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)


def kill_postgres_backend(stack: Stack) -> int:
    """SIGKILL one client backend: the postmaster then ends every backend and runs crash recovery.

    That is Postgres "killed and restarted" as far as clients can tell
    (every connection drops, new ones are refused until recovery is done),
    while the postmaster itself, which the supervisor watches, stays up.
    """
    postmaster, *children = postgres_pids(stack)
    for pid in children:
        try:
            title = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        # Client backends are titled "postgres: <user> <database> <host>(<port>) <state>".
        if "(" in title and title.startswith("postgres: memstream "):
            os.kill(pid, signal.SIGKILL)
            return pid
    raise RuntimeError(f"no client backend under postmaster {postmaster}")


def kill_postmaster(stack: Stack) -> int:
    """SIGKILL the postmaster itself: the supervisor must start Postgres again (WAL recovery)."""
    postmaster = postgres_pids(stack)[0]
    os.kill(postmaster, signal.SIGKILL)
    return postmaster


def app_restarts(stack: Stack, name: str = "app") -> int:
    """How often the supervisor restarted the app, or worker `worker-N` (their "exited" lines in up.log)."""
    return (stack.data_dir / "up.log").read_text(errors="replace").count(f"{name} exited with")


def record_fault_figures(test: str, **figures: Any) -> dict[str, Any]:
    """Print one summary line (visible with `pytest -s`) and append it to bench-results/fault-tests.jsonl.

    Called before a test's assertions, so a failing run still reports what it saw.
    """
    line = {"test": test, "at": datetime.now(UTC).isoformat(timespec="seconds"), **figures}
    print(f"\nFAULT {test}: " + ", ".join(f"{k}={v}" for k, v in figures.items()), flush=True)
    FAULT_RESULTS.parent.mkdir(parents=True, exist_ok=True)
    with FAULT_RESULTS.open("ab") as out:
        out.write(orjson.dumps(line, option=orjson.OPT_NON_STR_KEYS) + b"\n")
    return line
