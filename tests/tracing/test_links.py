"""With tracing on: a turn's context travels in its Kafka headers, a stage batch links to it, recall is named."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import faust
import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from agents.stage import batched_agent, forward
from schemas import TurnEvent
from services.api import recall as recall_module
from services.api.models import RecallRequest, RecallResponse
from services.core import tracing
from services.core.config import Settings
from tests.stack import turn
from tests.tracing.conftest import recording_turn_producer

STAGE = "traced_stage"


@dataclass
class Sink:
    """An outbound topic that records each send with its headers."""

    name: str
    sent: list[tuple[bytes, bytes, Any]] = field(default_factory=list)

    async def send(self, *, key: bytes, value: bytes, headers: Any = None) -> asyncio.Future[None]:
        self.sent.append((key, value, headers))
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done

    def get_topic_name(self) -> str:
        return self.name


@pytest.fixture
def spans() -> InMemorySpanExporter:
    exporter = InMemorySpanExporter()
    assert tracing.configure("test", exporter=exporter)
    return exporter


def traceparent(headers: Any) -> str:
    (value,) = [v for k, v in headers if k == "traceparent"]
    return cast(bytes, value).decode()


def named(exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name == name]


async def test_a_stage_batch_links_to_the_turns_it_carries_and_passes_its_own_context_on(
    spans: InMemorySpanExporter, tmp_path: Path
) -> None:
    producer, recorder = recording_turn_producer()
    events = [TurnEvent.model_validate(turn("acme", f"u{i}", "s", 0, "I like green tea.")) for i in range(2)]
    await producer.send_events(events)
    published = named(spans, "chat.turns publish")
    assert len(published) == 2
    assert all(s.kind is SpanKind.PRODUCER for s in published)
    assert {s.attributes["memstream.tenant_id"] for s in published if s.attributes} == {"acme"}
    for span, (_, _, _, headers) in zip(published, recorder.sent, strict=True):
        assert span.context is not None
        assert traceparent(headers).startswith(f"00-{span.context.trace_id:032x}-{span.context.span_id:016x}-")

    app = faust.App("test-tracing", broker="kafka://127.0.0.1:1", store="memory://", web_enabled=False)
    inbound = app.topic("chat.turns", key_type=bytes, value_type=bytes, key_serializer="raw", value_serializer="raw")
    out, dlq = Sink("memory.candidates"), Sink("memory.dlq")

    async def handle(batch: list[TurnEvent]) -> None:
        await forward(out, STAGE, batch)

    settings = Settings(data_dir=tmp_path)
    batched_agent(
        app, inbound, dlq, settings, keys=None, stage=STAGE, model=TurnEvent, size=10, within=0.05, handle=handle
    )
    async with app.agents[STAGE].test_context() as agent:
        for _, key, value, headers in recorder.sent:
            await agent.put(value, key=key, headers=headers, wait=False)
        for _ in range(250):
            if len(out.sent) == 2:
                break
            await asyncio.sleep(0.02)
    assert len(out.sent) == 2
    assert not dlq.sent

    batches = named(spans, f"{STAGE} process")
    linked = {(link.context.trace_id, link.context.span_id) for b in batches for link in b.links}
    assert linked == {(s.context.trace_id, s.context.span_id) for s in published if s.context is not None}
    assert all(
        b.kind is SpanKind.CONSUMER and b.attributes and b.attributes["memstream.stage"] == STAGE for b in batches
    )
    # What the stage sent downstream carries its batch span's context, for the next stage to link to.
    contexts = {b.context.span_id: b.context.trace_id for b in batches if b.context is not None}
    for _, _, headers in out.sent:
        _, trace_id, span_id, _ = traceparent(headers).split("-")
        assert contexts[int(span_id, 16)] == int(trace_id, 16)


async def test_recall_is_a_search_memory_span_with_no_user_text(
    spans: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def answered(*_: Any) -> RecallResponse:
        return RecallResponse(memories=[], prompt="", tokens_used=0, working=None)

    monkeypatch.setattr(recall_module, "_recall", answered)
    query = "what tea does the user like?"
    req = RecallRequest(tenant_id="acme", user_id="u-42", query=query, top_k=5, session_id="s-1")
    # Only the settings of the runtime are read before the (replaced) search: the request's defaults.
    runtime = SimpleNamespace(settings=Settings())
    await recall_module.recall(cast(Any, runtime), req, cast(Any, None), cast(Any, None))
    (span,) = named(spans, "search_memory")
    assert dict(span.attributes or {}) == {
        "gen_ai.operation.name": "search_memory",
        "gen_ai.request.top_k": 5,
        "gen_ai.conversation.id": "s-1",
        "memstream.tenant_id": "acme",
        "memstream.recall.as_of": False,
        "memstream.recall.hits": 0,
    }
    assert query not in str(span.to_json())
    assert "u-42" not in str(span.to_json())


async def test_malformed_trace_headers_are_no_link_and_no_failure(spans: InMemorySpanExporter) -> None:
    @dataclass
    class Event:
        headers: Any

    odd = [Event([("traceparent", b"00-zz-1-01")]), Event(None), Event({"traceparent": b"\xff\xfe"}), Event(42)]
    assert tracing.links(odd) == []
