"""Read replicas on the embedded stack: two read-service processes on one port, each on its own index.

MEMSTREAM_READ_REPLICAS=2: the stages run in the app process (no HTTP API),
and replicas r1 and r2 each keep a Qdrant Edge shard of their own, fed from
memory.changes, behind one port (SO_REUSEPORT). Every answer names the
replica that gave it (x-memstream-replica), so the test can ask each one.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.test_faults import fresh_stack
from tests.stack import Stack, produce, run_cli, turn, user_path, wait_for

pytestmark = pytest.mark.e2e
TENANT = "replica-acme"
REPLICAS = ("r1", "r2")


@pytest.fixture
def replicas_stack(tmp_path: Path) -> Iterator[Stack]:
    env = {
        "MEMSTREAM_READ_REPLICAS": "2",
        "MEMSTREAM_GENERATION_REFRESH_SECONDS": "0.5",
        "MEMSTREAM_HTTP_REQUEST_TIMEOUT": "15",
        "MEMSTREAM_COMMAND_WAIT_TIMEOUT": "12",
    }
    yield from fresh_stack(tmp_path, env)


def by_replica(stack: Stack, ask: Callable[[httpx.Client], httpx.Response], tries: int = 60) -> dict[str, Any]:
    """Each replica's answer: every try on a new connection, which the kernel hands to either replica."""
    answers: dict[str, Any] = {}
    for _ in range(tries):
        with httpx.Client(base_url=stack.base_url, headers=stack.headers, timeout=30) as client:
            response = ask(client)
        answers[response.headers["x-memstream-replica"]] = response
        if set(answers) == set(REPLICAS):
            break
    return answers


def recall_texts(stack: Stack, user: str, query: str) -> dict[str, list[str]]:
    body = {"tenant_id": TENANT, "user_id": user, "query": query, "record_access": False}
    answers = by_replica(stack, lambda c: c.post("/v1/recall", json=body))
    out: dict[str, list[str]] = defaultdict(list)
    for name, response in answers.items():
        assert response.status_code == 200, response.text
        out[name] = [m["text"] for m in response.json()["memories"]]
    return out


def everywhere(stack: Stack, user: str, query: str, text: str) -> bool:
    seen = recall_texts(stack, user, query)
    return set(seen) == set(REPLICAS) and all(any(text in t for t in texts) for texts in seen.values())


def even_split(stack: Stack, clients: int, within: float) -> Counter[str]:
    """Where `clients` keep-alive connections are once they have stayed evenly split for three rounds.

    Each round every client asks once; a response with `connection: close`
    (a replica over its share) means that client reconnects on its next ask.
    """
    pool = [httpx.Client(base_url=stack.base_url, headers=stack.headers, timeout=30) for _ in range(clients)]
    deadline, steady = time.monotonic() + within, 0
    split: Counter[str] = Counter()
    try:
        while time.monotonic() < deadline and steady < 3:
            answers = [c.get("/healthz") for c in pool]
            kept = [r for r in answers if r.headers.get("connection") != "close"]
            split = Counter(r.headers["x-memstream-replica"] for r in kept)
            even = len(kept) == clients and max(split.values()) - min(split.values(), default=0) <= 1
            steady = steady + 1 if even and len(split) == len(REPLICAS) else 0
            time.sleep(0.3)
    finally:
        for c in pool:
            c.close()
    return split


def replica_pid(stack: Stack, number: int) -> int:
    return int((stack.data_dir / "run" / f"replica-{number}.pid").read_text())


async def test_replicas_share_a_port_and_each_serve_every_write(replicas_stack: Stack) -> None:
    stack = replicas_stack
    user = f"user-{uuid.uuid4().hex[:8]}"

    # Both replicas answer on the one port, say who they are, and report both replicas' lag.
    ready = by_replica(stack, lambda c: c.get("/readyz"))
    assert set(ready) == set(REPLICAS)
    for name, response in ready.items():
        body = response.json()
        assert response.status_code == 200, body
        assert body["checks"]["index_replica"] is True
        assert body["replica"]["name"] == name
        assert body["replica"]["caught_up"] is True
    metrics = by_replica(stack, lambda c: c.get("/metrics"))
    wait_for(
        lambda: all(
            f'memstream_replica_lag_messages{{generation="default",replica="{n}"}}' in stack.get("/metrics").text
            for n in REPLICAS
        ),
        30,
        "both replicas' lag on /metrics",
    )
    assert set(metrics) == set(REPLICAS)

    # A turn becomes memory in both replicas' indexes.
    await produce(stack.bootstrap, [turn(TENANT, user, "s1", 0, "I keep a pet iguana called Ziggy at home.")])
    wait_for(lambda: everywhere(stack, user, "what pet does the user have?", "iguana"), 90, "the turn on both")

    # Read-your-writes: after ?wait=true answers 200, every replica already has the write.
    added = stack.request(
        "POST",
        f"/v1/users/{user_path(user)}/memories",
        params={"tenant_id": TENANT, "wait": "true"},
        json={"type": "preference", "text": "Prefers window seats on night trains"},
    )
    assert added.status_code == 200, added.text
    seen = recall_texts(stack, user, "which seat does the user prefer on trains?")
    assert set(seen) == set(REPLICAS)
    for name, texts in seen.items():
        assert "Prefers window seats on night trains" in texts, (name, texts)

    # Eight keep-alive clients end up four on each replica, wherever the kernel first placed them.
    assert even_split(stack, clients=8, within=30) == {"r1": 4, "r2": 4}

    # A replica killed is started again, on its own shard, while the other answers meanwhile.
    first = replica_pid(stack, 1)
    os.kill(first, signal.SIGKILL)
    wait_for(lambda: stack.get("/healthz").status_code == 200, 10, "the other replica answering")
    wait_for(lambda: replica_pid(stack, 1) != first, 60, "replica 1 restarted")
    wait_for(lambda: everywhere(stack, user, "what pet does the user have?", "iguana"), 90, "both again")

    # A replica whose shard is gone fills a new one from the beginning of memory.changes.
    second = replica_pid(stack, 2)
    os.kill(second, signal.SIGKILL)
    shard = stack.data_dir / "replicas" / "r2"
    await asyncio.to_thread(shutil.rmtree, shard)
    wait_for(lambda: replica_pid(stack, 2) != second, 60, "replica 2 restarted")
    wait_for(lambda: (shard / "qdrant").is_dir(), 60, "replica 2's new shard")
    wait_for(
        lambda: everywhere(stack, user, "which seat does the user prefer on trains?", "window seats"),
        120,
        "replica 2 refilled from the log",
    )

    # A rebuilt generation: each replica fills its own copy of its index, then switches to it.
    rebuilt = run_cli(stack.env, "rebuild", "generation", "v2", "--from", "archive")
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert run_cli(stack.env, "generation", "switch", "v2").returncode == 0
    wait_for(
        lambda: {r.json()["generation"] for r in by_replica(stack, lambda c: c.get("/readyz")).values()} == {"v2"},
        120,
        "both replicas on generation v2",
    )
    for n in REPLICAS:
        assert (stack.data_dir / "replicas" / n / "generations" / "v2" / "qdrant").is_dir()
    wait_for(lambda: everywhere(stack, user, "what pet does the user have?", "iguana"), 60, "v2 on both")
    assert everywhere(stack, user, "which seat does the user prefer on trains?", "window seats")
