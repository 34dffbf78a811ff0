"""What traces cost a stage batch, off (the default) and on, measured in this process.

    python -m tests.bench.tracing_cost

A batch pays for its span, a link per turn context it carries and the
headers of what it sends on; everything else a stage does is the same
either way. So the cost is timed on exactly those calls, for a batch of
turns that carry a `traceparent` each, and set against the time a turn
spends in the pipeline at the throughput `make bench` just measured.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from services.core import tracing
from services.core.stages import STAGE_NAMES

BATCH = 50


@dataclass
class _Event:
    headers: list[tuple[str, bytes]] = field(default_factory=list)


class _Discard(SpanExporter):
    """Spans are built, processed and handed over, then dropped: the exporter's network is not the stage's cost."""

    def __init__(self) -> None:
        self.spans = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.spans += len(spans)
        return SpanExportResult.SUCCESS


def _batch(events: list[_Event]) -> None:
    with tracing.batch_span("bench", events):
        for _ in events:
            tracing.header_kwargs()


def _per_batch_us(events: list[_Event], batches: int) -> float:
    for _ in range(100):
        _batch(events)
    started = time.perf_counter()
    for _ in range(batches):
        _batch(events)
    return (time.perf_counter() - started) / batches * 1e6


def _traced_events() -> list[_Event]:
    """Turns as a traced producer sends them: each with its own context."""
    events = []
    for _ in range(BATCH):
        with tracing.tracer().start_as_current_span("chat.turns publish"):
            events.append(_Event(headers=tracing.outgoing_headers() or []))
    return events


def measure(turns_per_s: float | None, batches: int = 2_000) -> dict[str, Any]:
    exporter = _Discard()
    tracing.configure("bench", exporter=exporter)
    try:
        events = _traced_events()
        on = _per_batch_us(events, batches)
    finally:
        tracing.shutdown()
    off = _per_batch_us(events, batches)
    out: dict[str, Any] = {
        "batch_turns": BATCH,
        "off_us_per_batch": off,
        "on_us_per_batch": on,
        "spans": exporter.spans,
    }
    if turns_per_s:
        # Every stage pays once per batch; a turn's share of the pipeline's time is 1 / throughput.
        stages = len(STAGE_NAMES)
        for name, us in (("off", off), ("on", on)):
            out[f"{name}_share_of_turn_time"] = us * stages / BATCH / 1e6 * turns_per_s
    return out


if __name__ == "__main__":
    print(json.dumps(measure(None), indent=2))
