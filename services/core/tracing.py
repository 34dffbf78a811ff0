"""OpenTelemetry traces from ingest to recall, off unless the standard OTLP environment asks for them.

Off (no `OTEL_EXPORTER_OTLP_ENDPOINT`, `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`
or `OTEL_TRACES_EXPORTER`), every span is the API's no-op one and no
header is read or written: the hot paths pay a flag check. On, `configure`
(called once at process start, never at import) installs an SDK
TracerProvider that batches spans to the OTLP/HTTP exporter. The SDK is
imported only then.

A turn's context travels in its Kafka headers as W3C `traceparent` /
`tracestate`. A stage's batch span links to the context of every message
it carries (a batch has many parents, so links, not a parent), and what
the stage sends downstream carries the batch span's context in turn.
"""

from __future__ import annotations

import atexit
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from opentelemetry import trace
from opentelemetry.propagators.textmap import Getter
from opentelemetry.semconv._incubating.attributes.gen_ai_attributes import GEN_AI_OPERATION_NAME
from opentelemetry.trace import Link, Span, SpanKind, Tracer
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from opentelemetry.util.types import AttributeValue

Headers = list[tuple[str, bytes]]

TRACER_NAME = "memstream"
TENANT = "memstream.tenant_id"
STAGE = "memstream.stage"
BATCH_SIZE = "memstream.batch.size"
EVENTS = "memstream.events"
SCOPE = "memstream.memory.scope"
HITS = "memstream.recall.hits"
AS_OF = "memstream.recall.as_of"

_ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
_PROPAGATOR = TraceContextTextMapPropagator()

_tracer: Tracer = trace.NoOpTracer()
_provider: Any = None  # the SDK's TracerProvider once configured


def wanted(environ: Mapping[str, str] | None = None) -> bool:
    """Whether the environment asks for traces (an OTLP endpoint, or an exporter other than `none`)."""
    env = os.environ if environ is None else environ
    if any(env.get(name) for name in _ENDPOINT_VARIABLES):
        return True
    exporter = env.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    return bool(exporter) and exporter != "none"


def configure(role: str, *, exporter: Any = None) -> bool:
    """Install the SDK provider for this process if the environment asks (or `exporter` is given); True if on.

    `role` names the process (`worker`, `api`, `produce`...): the service is
    `OTEL_SERVICE_NAME`, else `memstream-<role>`. `exporter` (tests) is used
    through a synchronous processor instead of the batching OTLP one.
    """
    global _tracer, _provider
    if _provider is not None:
        return True
    if exporter is None and not wanted():
        return False
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

    name = os.environ.get("OTEL_SERVICE_NAME") or f"memstream-{role}"
    provider = TracerProvider(resource=Resource.create({SERVICE_NAME: name}))
    if exporter is None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        atexit.register(shutdown)  # what is still batched is exported before the process ends
    else:
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    _provider = provider
    _tracer = provider.get_tracer(TRACER_NAME)
    return True


def enabled() -> bool:
    return _provider is not None


def provider() -> Any:
    """The SDK provider this process installed, or None (off)."""
    return _provider


def shutdown() -> None:
    """Flush what is batched and go back to the no-op tracer (process exit, tests)."""
    global _tracer, _provider
    if _provider is not None:
        _provider.shutdown()
    _provider = None
    _tracer = trace.NoOpTracer()


def tracer() -> Tracer:
    return _tracer


def outgoing_headers() -> Headers | None:
    """The current span's context as Kafka headers, or None when off or no span is recording."""
    if _provider is None:
        return None
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier)
    return [(k, v.encode()) for k, v in carrier.items()] or None


class _HeaderGetter(Getter[Any]):
    """Reads a context field from headers as a list of (str, bytes) or a mapping (Faust events)."""

    def get(self, carrier: Any, key: str) -> list[str] | None:
        items = carrier.items() if isinstance(carrier, Mapping) else carrier
        for name, value in items:
            if name == key and value is not None:
                return [value.decode("latin-1") if isinstance(value, bytes) else str(value)]
        return None

    def keys(self, carrier: Any) -> list[str]:
        items = carrier.items() if isinstance(carrier, Mapping) else carrier
        return [name for name, _ in items]


_GETTER = _HeaderGetter()


def extract(headers: Any) -> trace.SpanContext | None:
    """The valid span context in `headers`, or None (off, no headers, or a malformed traceparent)."""
    if _provider is None or not headers:
        return None
    try:
        context = trace.get_current_span(_PROPAGATOR.extract(headers, getter=_GETTER)).get_span_context()
    except (TypeError, ValueError, AttributeError):  # headers we cannot read are no reason to fail a batch
        return None
    return context if context.is_valid else None


def links(events: Iterable[Any]) -> list[Link]:
    """A link to each distinct context carried by `events` (anything with `.headers`, as Faust events)."""
    if _provider is None:
        return []
    found: dict[tuple[int, int], Link] = {}
    for event in events:
        context = extract(getattr(event, "headers", None))
        if context is not None:
            found.setdefault((context.trace_id, context.span_id), Link(context))
    return list(found.values())


@contextmanager
def batch_span(stage: str, events: Sequence[Any]) -> Iterator[Span]:
    """The span of one stage batch, linked to the contexts its events carry; current while the batch runs."""
    if _provider is None:
        yield trace.INVALID_SPAN
        return
    attributes: dict[str, AttributeValue] = {STAGE: stage, BATCH_SIZE: len(events)}
    with _tracer.start_as_current_span(
        f"{stage} process", kind=SpanKind.CONSUMER, links=links(events), attributes=attributes
    ) as current:
        yield current


@contextmanager
def memory_operation(operation: str, tenant_id: str) -> Iterator[Span]:
    """A read-service span named by the GenAI conventions' operation (`search_memory`, `create_memory`...).

    Attributes are identifiers and counts, never what a person wrote.
    """
    if _provider is None:
        yield trace.INVALID_SPAN
        return
    attributes: dict[str, AttributeValue] = {GEN_AI_OPERATION_NAME: operation, TENANT: tenant_id}
    with _tracer.start_as_current_span(operation, kind=SpanKind.INTERNAL, attributes=attributes) as current:
        yield current


def header_kwargs() -> dict[str, Headers]:
    """`{"headers": ...}` with the current context for a Faust-style `send(key=, value=, headers=)`; `{}` when off.

    Empty when off, so a send without headers stays exactly as it was.
    """
    headers = outgoing_headers()
    return {} if headers is None else {"headers": headers}
