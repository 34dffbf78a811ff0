"""Prometheus metrics of the optional LLM path (same label rule: no tenant or user ids).

`operation` is one of the few fixed operation names (extract_facts, decide,
summarize_episode, synthesize); `result` is an `Outcome` label, so a falling
success rate or a growing fallback share is visible per operation.
"""

from __future__ import annotations

from prometheus_client import Counter, Histogram

_LLM_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0)

RESULTS = ("ok", "repaired", "invalid_output", "timeout", "rate_limited", "server_error", "unavailable", "client_error")

LATENCY = Histogram(
    "memstream_llm_request_seconds",
    "One HTTP request to the LLM or embeddings endpoint, retries counted separately",
    ["operation"],
    buckets=_LLM_BUCKETS,
)
TOKENS = Counter("memstream_llm_tokens_total", "Tokens the endpoint reported as used", ["operation", "kind"])
OUTCOMES = Counter("memstream_llm_outcomes_total", "Final result of one LLM operation call", ["operation", "result"])
RETRIES = Counter("memstream_llm_retries_total", "Requests retried after a transient failure", ["operation", "cause"])


def declare(operation: str) -> None:
    """Zero series up front, so a fallback rate that never fired reads 0, not "no data"."""
    for result in RESULTS:
        OUTCOMES.labels(operation=operation, result=result)
    for kind in ("prompt", "completion"):
        TOKENS.labels(operation=operation, kind=kind)
