"""With OTEL_EXPORTER_OTLP_ENDPOINT set, spans reach a real OTLP/HTTP receiver, decoded as a collector decodes them."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from schemas import TurnEvent
from services.core import tracing
from tests.stack import turn
from tests.tracing.conftest import recording_turn_producer


class Receiver(ThreadingHTTPServer):
    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.requests: list[ExportTraceServiceRequest] = []
        self.paths: list[str] = []


class _Handler(BaseHTTPRequestHandler):
    server: Receiver

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        self.server.paths.append(self.path)
        self.server.requests.append(request)
        answer = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *_: Any) -> None:
        pass


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def _value(attribute: Any) -> Any:
    return getattr(attribute.value, attribute.value.WhichOneof("value"))


async def test_spans_reach_an_otlp_http_receiver(receiver: Receiver, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{receiver.server_port}")
    assert tracing.configure("worker")
    producer, recorder = recording_turn_producer()
    await producer.send(TurnEvent.model_validate(turn("acme", "u", "s", 0, "I like green tea.")))

    class Event:
        def __init__(self, headers: Any) -> None:
            self.headers = headers

    with tracing.batch_span("window", [Event(recorder.sent[0][3])]):
        downstream = tracing.outgoing_headers()
    with tracing.batch_span("embedder", [Event(downstream)]):
        pass
    with tracing.memory_operation("search_memory", "acme"):
        pass
    tracing.shutdown()  # flushes the batch processor

    assert receiver.paths
    assert set(receiver.paths) == {"/v1/traces"}
    spans: dict[str, Any] = {}
    services = set()
    for request in receiver.requests:
        for resource_spans in request.resource_spans:
            services |= {_value(a) for a in resource_spans.resource.attributes if a.key == "service.name"}
            for scope in resource_spans.scope_spans:
                spans |= {s.name: s for s in scope.spans}
    assert services == {"memstream-worker"}
    assert set(spans) == {"chat.turns publish", "window process", "embedder process", "search_memory"}
    for stage, upstream in (("window process", "chat.turns publish"), ("embedder process", "window process")):
        (link,) = spans[stage].links
        assert (link.trace_id, link.span_id) == (spans[upstream].trace_id, spans[upstream].span_id)
    attributes = {a.key: _value(a) for a in spans["search_memory"].attributes}
    assert attributes == {"gen_ai.operation.name": "search_memory", "memstream.tenant_id": "acme"}
