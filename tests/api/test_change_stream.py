"""The Kafka-backed console routes on a whole embedded stack: a user's changes as server-sent events (their own
only, opened), consumer lag per stage, and dead letters with their original bytes."""

from __future__ import annotations

import asyncio
import base64
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from tests.stack import Stack, embedded_stack, produce_records, user_path, wait_for

pytestmark = pytest.mark.e2e
TENANT = "live-acme"


@pytest.fixture(scope="module")
def live_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    slow_ok = {"MEMSTREAM_HTTP_REQUEST_TIMEOUT": "15", "MEMSTREAM_COMMAND_WAIT_TIMEOUT": "12"}
    with embedded_stack(Path(tmp_path_factory.mktemp("console-live")), extra_env=slow_ok) as running:
        yield running


class Listener(threading.Thread):
    """Reads one SSE stream in the background, event by event, until told to stop."""

    def __init__(self, stack: Stack, user: str) -> None:
        super().__init__(daemon=True)
        self.url = f"{stack.base_url}/v1/users/{user_path(user)}/changes"
        self.headers = stack.headers
        self.events: list[tuple[str, Any]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        try:
            self.listen()
        except httpx.HTTPError:
            if not self.stop.is_set():  # the stream may end under a stopped listener, when the stack stops
                raise

    def listen(self) -> None:
        with httpx.stream(
            "GET", self.url, params={"tenant_id": TENANT}, headers=self.headers, timeout=httpx.Timeout(30, read=60)
        ) as response:
            assert response.headers["content-type"].startswith("text/event-stream")
            event = ""
            for line in response.iter_lines():
                if self.stop.is_set():
                    return
                if line.startswith("event: "):
                    event = line[7:]
                elif line.startswith("data: "):
                    self.events.append((event, orjson.loads(line[6:])))

    def of(self, kind: str) -> list[Any]:
        return [data for event, data in self.events if event == kind]


def add(stack: Stack, user: str, text: str) -> None:
    path = f"/v1/users/{user_path(user)}/memories"
    body = {"type": "preference", "text": text}
    response = stack.request("POST", path, params={"tenant_id": TENANT, "wait": "true"}, json=body)
    assert response.status_code in (200, 202), response.text


def test_a_users_changes_arrive_live_and_only_theirs(live_stack: Stack) -> None:
    user, other = f"u-{uuid.uuid4().hex[:8]}", f"u-{uuid.uuid4().hex[:8]}"
    listener = Listener(live_stack, user)
    listener.start()
    wait_for(lambda: listener.of("ready") or None, 60, "the stream's ready event")
    add(live_stack, other, "Someone else likes tea")
    add(live_stack, user, "Prefers window seats")
    [change] = wait_for(lambda: listener.of("change") or None, 60, "the user's change")
    listener.stop.set()
    assert change["op"] == "added"
    assert change["record"]["text"] == "Prefers window seats"
    assert change["user_id"] == user
    assert "vector" not in change
    assert all(c["user_id"] == user for c in listener.of("change"))


def test_lag_is_reported_per_stage(live_stack: Stack) -> None:
    report = live_stack.get("/v1/ops/lag")
    assert report.status_code == 200, report.text
    stages = report.json()["stages"]
    assert {s["stage"] for s in stages} == {"window", "summarizer", "embedder", "consolidator", "qdrant_sink"}
    assert all(s["lag"] is None or s["lag"] >= 0 for s in stages)


def test_dead_letters_come_with_reason_and_original_bytes(live_stack: Stack) -> None:
    hostile = b"<img src=x onerror=alert(1)> \x00not json"
    asyncio.run(produce_records(live_stack.bootstrap, [(None, hostile)]))

    def found() -> dict[str, Any] | None:
        entries = live_stack.get("/v1/ops/dlq", limit=20).json()["entries"]
        return next((e for e in entries if e["original_base64"] == base64.b64encode(hostile).decode()), None)

    try:
        entry = wait_for(found, 60, "the dead letter")
    except TimeoutError:
        pytest.fail(f"not among the dead letters: {live_stack.get('/v1/ops/dlq', limit=20).text}")
    assert entry["reason"]
    assert entry["preview"].isprintable()
    assert "\\x00" in entry["preview"]
