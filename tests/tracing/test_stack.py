"""The embedded stack exporting to an OTLP/HTTP receiver: one turn's links, stage by stage, to its recall."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.stack import Stack, embedded_stack, session_end, turn, wait_for
from tests.tracing.test_otlp import Receiver

pytestmark = pytest.mark.e2e
TENANT = "traced"
PIPELINE = ("window", "summarizer", "embedder", "consolidator", "qdrant_sink")


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def traced_stack(receiver: Receiver, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    otel = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{receiver.server_port}",
        "OTEL_BSP_SCHEDULE_DELAY": "200",
    }
    with embedded_stack(Path(tmp_path_factory.mktemp("traced-stack")), extra_env=otel) as running:
        yield running


def _spans(receiver: Receiver) -> list[tuple[str, Any]]:
    return [
        (next(a.value.string_value for a in rs.resource.attributes if a.key == "service.name"), span)
        for request in list(receiver.requests)
        for rs in request.resource_spans
        for scope in rs.scope_spans
        for span in scope.spans
    ]


def test_a_turn_is_linked_through_every_stage_to_the_index(traced_stack: Stack, receiver: Receiver) -> None:
    user = f"u-{uuid.uuid4().hex[:8]}"
    events = [turn(TENANT, user, "s1", 0, "I prefer window seats when I fly."), session_end(TENANT, user, "s1")]
    assert traced_stack.request("POST", "/v1/turns", json=events).status_code == 202

    def recalled() -> bool | None:
        found = traced_stack.recall(TENANT, user, "what seat does the user like?")
        return any("window seats" in m["text"] for m in found["memories"]) or None

    wait_for(recalled, 90, "the preference recalled")

    def chained() -> dict[bytes, Any] | None:
        by_id = {span.span_id: span for _, span in _spans(receiver)}
        publish = [s for s in by_id.values() if s.name == "chat.turns publish"]
        # Walk forward: each stage's batch that links to what the stage before it sent.
        frontier = {s.span_id for s in publish}
        for stage in ("window", "embedder", "consolidator", "qdrant_sink"):
            frontier = {
                s.span_id
                for s in by_id.values()
                if s.name == f"{stage} process" and any(link.span_id in frontier for link in s.links)
            }
            if not frontier:
                return None
        return by_id if any(s.name == "search_memory" for s in by_id.values()) else None

    by_id = wait_for(chained, 30, "the turn's spans linked through to the index")
    names = {s.name for s in by_id.values()}
    assert {"ingest turns", "chat.turns publish", "search_memory"} <= names
    assert {f"{stage} process" for stage in PIPELINE} <= names
    assert {service for service, _ in _spans(receiver)} == {"memstream-worker"}
