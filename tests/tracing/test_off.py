"""Off by default: no provider, no SDK, no headers, nothing for a stage to link or carry."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from opentelemetry import trace

from schemas import TurnEvent
from services.core import tracing
from tests.stack import turn
from tests.tracing.conftest import recording_turn_producer


async def test_nothing_is_installed_or_added_when_the_environment_is_unset() -> None:
    assert not tracing.wanted()
    assert not tracing.configure("worker")
    assert tracing.provider() is None
    assert not tracing.enabled()
    assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
    producer, recorder = recording_turn_producer()
    await producer.send(TurnEvent.model_validate(turn("acme", "u", "s", 0, "hello")))
    assert [headers for *_, headers in recorder.sent] == [None]
    assert tracing.header_kwargs() == {}
    assert tracing.outgoing_headers() is None

    class Event:
        headers = (("traceparent", b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"),)

    assert tracing.links([Event()]) == []
    with tracing.batch_span("window", [Event()]) as span:
        assert not span.is_recording()
    with tracing.memory_operation("search_memory", "acme") as span:
        assert not span.is_recording()


def test_the_sdk_is_not_even_imported_when_off() -> None:
    code = (
        "import sys; from services.core import tracing; import agents.stage, services.kafka.producer; "
        "assert not tracing.configure('worker'); assert 'opentelemetry.sdk.trace' not in sys.modules"
    )
    env = {"PATH": "/usr/bin:/bin"}
    subprocess.run([sys.executable, "-c", code], check=True, env=env, cwd=Path(__file__).parents[2])


def test_any_named_exporter_or_endpoint_turns_it_on() -> None:
    assert tracing.wanted({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"})
    assert tracing.wanted({"OTEL_TRACES_EXPORTER": "otlp"})
    assert not tracing.wanted({"OTEL_TRACES_EXPORTER": "none"})
    assert not tracing.wanted({"OTEL_EXPORTER_OTLP_ENDPOINT": ""})
