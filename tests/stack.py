"""Starting and talking to a real embedded stack from tests and benchmarks."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import httpx
import orjson

ROOT = Path(__file__).resolve().parent.parent
T = TypeVar("T")


@dataclass
class Stack:
    env: dict[str, str]
    data_dir: Path
    base_url: str
    bootstrap: str
    proc: subprocess.Popen[bytes]

    def app_pid(self) -> int:
        return int((self.data_dir / "run" / "app.pid").read_text())

    def post(self, path: str, body: dict[str, Any]) -> httpx.Response:
        return httpx.post(f"{self.base_url}{path}", json=body, timeout=30)

    def get(self, path: str, **params: Any) -> httpx.Response:
        return httpx.get(f"{self.base_url}{path}", params=params, timeout=30)

    def recall(self, tenant: str, user: str, query: str, **extra: Any) -> dict[str, Any]:
        response = self.post("/v1/recall", {"tenant_id": tenant, "user_id": user, "query": query, **extra})
        response.raise_for_status()
        data: dict[str, Any] = response.json()
        return data

    def memories(self, tenant: str, user: str, **params: Any) -> list[dict[str, Any]]:
        response = self.get(f"/v1/users/{user}/memories", tenant_id=tenant, limit=1000, **params)
        response.raise_for_status()
        found: list[dict[str, Any]] = response.json()["memories"]
        return found


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


def _ready(proc: subprocess.Popen[bytes], base_url: str) -> bool:
    if proc.poll() is not None:
        raise RuntimeError(f"memstream up exited with {proc.returncode}")
    return httpx.get(f"{base_url}/readyz", timeout=5).status_code == 200


@contextmanager
def embedded_stack(data_dir: Path, port_offset: int = 0, extra_env: dict[str, str] | None = None) -> Iterator[Stack]:
    kafka = f"127.0.0.1:{19092 + port_offset}"
    http_port = 18080 + port_offset
    env = {
        **os.environ,
        "MEMSTREAM_DATA_DIR": str(data_dir),
        "MEMSTREAM_TOPICS_FILE": str(ROOT / "topics.yaml"),
        "MEMSTREAM_KAFKA_BOOTSTRAP": kafka,
        "MEMSTREAM_PG_DSN": f"postgresql://memstream@127.0.0.1:{15433 + port_offset}/memstream",
        "MEMSTREAM_HTTP_PORT": str(http_port),
        "MEMSTREAM_WORKER_METRICS_PORT": str(19464 + port_offset),
        "MEMSTREAM_LOG_LEVEL": "info",
        **(extra_env or {}),
    }
    data_dir.mkdir(parents=True, exist_ok=True)
    log = open(data_dir / "up.log", "ab")  # noqa: SIM115
    proc = subprocess.Popen(
        [sys.executable, "-m", "services.cli", "up"], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT
    )
    stack = Stack(env, data_dir, f"http://127.0.0.1:{http_port}", kafka, proc)
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
    from services.producer import TurnProducer

    raw = [e if isinstance(e, bytes) else orjson.dumps(e) for e in events]
    async with TurnProducer(bootstrap) as producer:
        await producer.send_raw(raw)
