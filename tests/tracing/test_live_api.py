"""The read service's own routes, traced: POST /v1/turns, recall and a memory command, over HTTP."""

from __future__ import annotations

import uuid

from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from services.core import tracing
from tests.api.conftest import LiveApi
from tests.stack import turn

TENANT = "traced"


def test_route_spans_name_their_operation_and_carry_no_user_text(api: LiveApi) -> None:
    spans = InMemorySpanExporter()
    assert tracing.configure("api", exporter=spans)
    user = f"u-{uuid.uuid4().hex[:8]}"
    secret = "my secret plan for Lisbon"
    # Kafka never answers here: the ingest and the command end in 503, traced all the same.
    assert api.client.post("/v1/turns", json=turn(TENANT, user, "s", 0, secret)).status_code == 503
    recall = {"tenant_id": TENANT, "user_id": user, "query": secret, "top_k": 3, "session_id": "s"}
    assert api.client.post("/v1/recall", json=recall).status_code == 200
    added = api.client.post(
        f"/v1/users/{user}/memories", params={"tenant_id": TENANT}, json={"text": secret, "type": "preference"}
    )
    assert added.status_code == 503
    tracing.shutdown()

    by_name = {s.name: s for s in spans.get_finished_spans()}
    assert {"ingest turns", "chat.turns publish", "search_memory", "create_memory"} <= set(by_name)
    ingest, publish = by_name["ingest turns"], by_name["chat.turns publish"]
    assert ingest.kind is SpanKind.SERVER
    assert publish.parent is not None
    assert ingest.context is not None
    assert publish.parent.span_id == ingest.context.span_id
    assert dict(by_name["search_memory"].attributes or {}) == {
        "gen_ai.operation.name": "search_memory",
        "gen_ai.request.top_k": 3,
        "gen_ai.conversation.id": "s",
        "memstream.tenant_id": TENANT,
        "memstream.recall.as_of": False,
        "memstream.recall.hits": 0,
    }
    assert dict(by_name["create_memory"].attributes or {}) == {
        "gen_ai.operation.name": "create_memory",
        "memstream.tenant_id": TENANT,
        "memstream.memory.scope": "memory",
    }
    assert not by_name["create_memory"].status.is_ok  # the 503's cause is on the span
    exported = "".join(s.to_json() for s in spans.get_finished_spans())
    assert secret not in exported
    assert user not in exported
