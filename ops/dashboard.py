"""The Grafana dashboard, written as data and rendered to JSON.

    python -m ops.dashboard          # rewrite ops/grafana/dashboards/memstream.json

Panels live here rather than in hand-edited JSON so every query is one line
to review, and tests can evaluate the very same expressions against a real
Prometheus. A test fails when the committed JSON drifts from this module.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DATASOURCE = {"type": "prometheus", "uid": "memstream-prometheus"}
OUTPUT = Path(__file__).parent / "grafana" / "dashboards" / "memstream.json"
# Grafana's rate window; tests substitute a fixed window.
RATE = "$__rate_interval"


@dataclass(frozen=True)
class Target:
    expr: str
    legend: str


@dataclass(frozen=True)
class Panel:
    title: str
    unit: str
    targets: tuple[Target, ...]
    description: str = ""


def _rate(metric: str, by: str = "", where: str = "") -> str:
    grouped = f" by ({by})" if by else ""
    return f"sum{grouped} (rate({metric}{where}[{RATE}]))"


def _quantile(q: float, metric: str, by: str = "") -> str:
    labels = f"{by}, le" if by else "le"
    return f"histogram_quantile({q}, sum by ({labels}) (rate({metric}_bucket[{RATE}])))"


PANELS: tuple[Panel, ...] = (
    Panel(
        "Ingest rate",
        "reqps",
        (Target(_rate("memstream_stage_events_in_total", where='{stage="window"}'), "turns/s"),),
        "Chat events consumed from chat.turns.",
    ),
    Panel(
        "Stage throughput",
        "ops",
        (Target(_rate("memstream_stage_events_in_total", by="stage"), "{{stage}}"),),
        "Events each stage consumed per second.",
    ),
    Panel(
        "Stage p95 latency",
        "s",
        (Target(_quantile(0.95, "memstream_stage_processing_seconds", by="stage"), "{{stage}}"),),
        "Time per event or batch, by stage.",
    ),
    Panel(
        "Stage errors",
        "ops",
        (Target(_rate("memstream_stage_errors_total", by="stage"), "{{stage}}"),),
    ),
    Panel(
        "Consumer lag",
        "short",
        (Target("sum by (topic) (memstream_consumer_lag_messages)", "{{topic}}"),),
        "Messages not yet committed by the worker group, by topic.",
    ),
    Panel(
        "Freshness p50 / p99",
        "s",
        (
            Target(_quantile(0.5, "memstream_freshness_seconds", by="store"), "p50 {{store}}"),
            Target(_quantile(0.99, "memstream_freshness_seconds", by="store"), "p99 {{store}}"),
        ),
        "From a turn's timestamp to its memory committed (postgres) and searchable (qdrant).",
    ),
    Panel(
        "Consolidation decisions",
        "ops",
        (Target(_rate("memstream_consolidation_decisions_total", by="kind"), "{{kind}}"),),
    ),
    Panel(
        "DLQ rate",
        "ops",
        (Target(_rate("memstream_dlq_messages_total", by="reason"), "{{reason}}"),),
        "Messages sent to memory.dlq, by reason.",
    ),
    Panel(
        "Store p95 latency",
        "s",
        (
            Target(
                _quantile(0.95, "memstream_store_operation_seconds", by="store, operation"), "{{store}} {{operation}}"
            ),
        ),
    ),
    Panel(
        "Recall latency p50 / p99",
        "s",
        (
            Target(_quantile(0.5, "memstream_recall_seconds"), "p50"),
            Target(_quantile(0.99, "memstream_recall_seconds"), "p99"),
        ),
    ),
    Panel(
        "Recall giving way to ingest",
        "short",
        (
            Target("max(memstream_read_yield)", "share recall gives up (0 = none)"),
            Target(_quantile(0.95, "memstream_read_gate_wait_seconds"), "p95 wait for a turn (s)"),
            Target(_rate("memstream_read_gate_overruns_total"), "started at the longest wait /s"),
        ),
        "Above 0 while a stage is behind: recalls are paced so the stages catch up (services/api/read_gate.py).",
    ),
    Panel(
        "Recall results and tokens (median)",
        "short",
        (
            Target(_quantile(0.5, "memstream_recall_results"), "memories"),
            Target(_quantile(0.5, "memstream_recall_tokens_used"), "tokens"),
        ),
    ),
    Panel(
        "Embedder",
        "short",
        (
            Target(_rate("memstream_embedder_texts_total"), "texts/s"),
            Target(
                _rate("memstream_embedder_cache_lookups_total", where='{result="hit"}')
                + " / "
                + _rate("memstream_embedder_cache_lookups_total"),
                "cache hit ratio",
            ),
        ),
    ),
    Panel(
        "Garbage collector pauses",
        "s",
        (
            Target(_quantile(0.99, "memstream_gc_pause_seconds", by="generation"), "p99 generation {{generation}}"),
            Target(
                _rate("memstream_gc_pause_seconds_sum", by="generation"), "held per second, generation {{generation}}"
            ),
        ),
        "Each collection stalls every stage and request of its process; generation 2 is a full collection.",
    ),
    Panel(
        "Memories",
        "short",
        (Target("sum by (type, status) (memstream_memories)", "{{type}} {{status}}"),),
        "Rows in Postgres, refreshed by the worker on a timer.",
    ),
    Panel(
        "HTTP requests",
        "reqps",
        (Target(_rate("memstream_http_requests_total", by="route, status"), "{{route}} {{status}}"),),
    ),
)


def _panel_json(panel: Panel, panel_id: int) -> dict[str, Any]:
    width, height = 12, 8
    return {
        "id": panel_id,
        "type": "timeseries",
        "title": panel.title,
        "description": panel.description,
        "datasource": DATASOURCE,
        "gridPos": {"h": height, "w": width, "x": (panel_id - 1) % 2 * width, "y": (panel_id - 1) // 2 * height},
        "fieldConfig": {"defaults": {"unit": panel.unit}, "overrides": []},
        "options": {"legend": {"displayMode": "list", "placement": "bottom"}, "tooltip": {"mode": "multi"}},
        "targets": [
            {"refId": chr(ord("A") + i), "datasource": DATASOURCE, "expr": t.expr, "legendFormat": t.legend}
            for i, t in enumerate(panel.targets)
        ],
    }


def render() -> dict[str, Any]:
    return {
        "uid": "memstream-pipeline",
        "title": "memstream pipeline",
        "tags": ["memstream"],
        "timezone": "browser",
        "schemaVersion": 39,
        "version": 1,
        "refresh": "10s",
        "time": {"from": "now-30m", "to": "now"},
        "panels": [_panel_json(p, i) for i, p in enumerate(PANELS, start=1)],
    }


def dumps() -> str:
    return json.dumps(render(), indent=2) + "\n"


def main() -> None:
    OUTPUT.parent.mkdir(parents=True, exist_ok=True)
    OUTPUT.write_text(dumps())


if __name__ == "__main__":
    main()
