"""Every Prometheus metric memstream exports, in one place.

Labels are low-cardinality by rule: stage, topic, reason, operation, kind —
never a tenant or user id. Keeping them together keeps that rule checkable in
one file, and keeps one registry name from being claimed twice.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
_FRESHNESS_BUCKETS = (0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0, 30.0, 60.0, 300.0)
_BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
_LLM_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0)

EVENTS_IN = Counter("memstream_stage_events_in_total", "Events a stage consumed", ["stage"])
EVENTS_OUT = Counter("memstream_stage_events_out_total", "Events a stage produced", ["stage", "topic"])
STAGE_ERRORS = Counter("memstream_stage_errors_total", "Events a stage could not process", ["stage"])
STAGE_LATENCY = Histogram(
    "memstream_stage_processing_seconds",
    "Time a stage spent on one event or batch",
    ["stage"],
    buckets=_LATENCY_BUCKETS,
)
GC_PAUSE = Histogram(
    "memstream_gc_pause_seconds",
    "Time one run of Python's garbage collector held the process, by generation (0 young, 2 full)",
    ["generation"],
    buckets=_LATENCY_BUCKETS,
)
BATCH_SIZE = Histogram("memstream_stage_batch_size", "Events per batch", ["stage"], buckets=_BATCH_BUCKETS)
CONSUMER_LAG = Gauge("memstream_consumer_lag_messages", "Messages behind the log end", ["topic", "partition"])
# Per process: how a stage's partitions spread over the processes that run it.
ASSIGNED_PARTITIONS = Gauge(
    "memstream_assigned_partitions", "Partitions this process holds in the stage's consumer group", ["stage"]
)

FRESHNESS = Histogram(
    "memstream_freshness_seconds",
    "From a turn's timestamp to its memory being committed (postgres) or searchable (qdrant)",
    ["store"],
    buckets=_FRESHNESS_BUCKETS,
)
DECISIONS = Counter("memstream_consolidation_decisions_total", "Consolidator outcomes", ["kind"])
DLQ = Counter("memstream_dlq_messages_total", "Messages sent to memory.dlq", ["stage", "reason"])
# memory.changes messages a consumer could not open (services/archive/changes.py): `forgotten` = the user's key is
# gone, `unreadable` = it does not open with the user's key. Skipped, not dead-lettered.
CHANGES_SKIPPED = Counter(
    "memstream_changes_skipped_total", "memory.changes messages skipped unopened", ["stage", "reason"]
)

STORE_LATENCY = Histogram(
    "memstream_store_operation_seconds", "Store call latency", ["store", "operation"], buckets=_LATENCY_BUCKETS
)
STORE_ERRORS = Counter("memstream_store_errors_total", "Store calls that failed", ["store", "operation"])

EMBED_TEXTS = Counter("memstream_embedder_texts_total", "Texts embedded by the model (cache misses)")
EMBED_CACHE = Counter("memstream_embedder_cache_lookups_total", "Embedding cache lookups", ["result"])
EMBED_SECONDS = Counter("memstream_embedder_busy_seconds_total", "Seconds the model spent embedding")
EMBED_BACKGROUND_QUEUED = Gauge(
    "memstream_embedder_background_queued",
    "Derived candidates (episodes, questions) the embedder holds to embed after the fresh ones",
)

RECALL_LATENCY = Histogram("memstream_recall_seconds", "Recall request latency", buckets=_LATENCY_BUCKETS)
READ_YIELD = Gauge(
    "memstream_read_yield",
    "Share of the process recall gives up to ingest while the stages are behind (0: none; 1 - recall's share)",
)
READ_GATE_WAIT = Histogram(
    "memstream_read_gate_wait_seconds",
    "Seconds a recall waited for its turn while recall gave way to ingest",
    buckets=_LATENCY_BUCKETS,
)
READ_GATE_OVERRUNS = Counter(
    "memstream_read_gate_overruns_total", "Recalls started after the gate's longest wait, their turn not yet come"
)
RECALL_RESULTS = Histogram("memstream_recall_results", "Memories returned per recall", buckets=(0, 1, 2, 5, 10, 20, 50))
RECALL_TOKENS = Histogram(
    "memstream_recall_tokens_used",
    "Tokens of the packed memory block",
    buckets=(0, 50, 100, 250, 500, 1000, 2000, 4000),
)
HTTP_REQUESTS = Counter("memstream_http_requests_total", "HTTP requests by route and status", ["route", "status"])

MEMORIES = Gauge("memstream_memories", "Memories stored, by type and status", ["type", "status"])

# Generations (services/core/generations.py): few by nature, so a name is a fair label.
GENERATION_SERVING = Gauge(
    "memstream_generation_serving",
    "1 for the generation the read service answers from, 0 for the others",
    ["generation"],
)
# Read replicas (services/api/replica.py): each process exports every replica's lag, as the others report it.
REPLICA_LAG = Gauge(
    "memstream_replica_lag_messages",
    "Messages of memory.changes a read replica has yet to apply to its own index",
    ["replica", "generation"],
)
REPLICA_REPORT_AGE = Gauge(
    "memstream_replica_report_age_seconds", "Seconds since a read replica last reported its position", ["replica"]
)
# Read replicas share a port; each keeps near an even share of its connections (services/api/balance.py).
REPLICA_CONNECTIONS = Gauge(
    "memstream_replica_connections", "HTTP connections a read replica holds open (its own, as scraped)", ["replica"]
)
REPLICA_REBALANCED = Counter(
    "memstream_replica_rebalanced_total",
    "Responses a read replica over its share of connections answered with connection: close",
    ["replica"],
)
GENERATION_LAG = Gauge(
    "memstream_generation_rebuild_lag_messages",
    "Messages a generation being rebuilt has yet to process, over all its stages",
    ["generation"],
)
# Rule extraction (agents/rules/extract.py) is linear in a turn's length; these show what the worst turns cost.
RULES_SECONDS = Histogram(
    "memstream_rules_extract_seconds", "Rule extraction time per user turn", buckets=_LATENCY_BUCKETS
)
RULES_STOPPED = Counter(
    "memstream_rules_stopped_total",
    "User turns whose rule extraction stopped early (reason budget: its time ran out; hits: enough preferences)",
    ["reason"],
)
ARCHIVE_SKIPPED = Counter(
    "memstream_archive_skipped_total",
    "Archived events a generation's window left out (reason forgotten: the user's data key is gone)",
    ["reason"],
)

# API key checks (services/auth/verifier.py): a falling cache share means Postgres answers most requests.
KEY_LOOKUPS = Counter(
    "memstream_auth_key_lookups_total", "API key checks by where the answer came from (cache, postgres)", ["source"]
)
for _source in ("cache", "postgres"):
    KEY_LOOKUPS.labels(source=_source)

# Access marks the read service sends from recalls (services/api/access.py).
ACCESS_MARKS = Counter(
    "memstream_access_marks_total",
    "Access marks from recall (one per memory per window), by outcome (sent, dropped)",
    ["outcome"],
)
for _outcome in ("sent", "dropped"):
    ACCESS_MARKS.labels(outcome=_outcome)

# The read service's key gate (services/api/auth.py).
AUTH_DECISIONS = Counter(
    "memstream_auth_decisions_total",
    "Requests to /v1 by authentication outcome (allowed, unauthenticated, forbidden)",
    ["outcome"],
)
for _outcome in ("allowed", "unauthenticated", "forbidden"):
    AUTH_DECISIONS.labels(outcome=_outcome)

# Recall query embeddings (services/embedding/query_cache.py).
QUERY_CACHE = Counter(
    "memstream_query_embedding_lookups_total",
    "Recall query embeddings by outcome: hit (cached), miss (sent to the model), joined (waited on a miss in flight)",
    ["result"],
)
for _result in ("hit", "miss", "joined"):
    QUERY_CACHE.labels(result=_result)
QUERY_BATCHES = Counter("memstream_query_embedding_batches_total", "Model calls made for recall query misses")


class LLM:
    """The optional LLM path's metrics (services/llm), grouped so its callers read `LLM.OUTCOMES` and the like.

    `operation` is one of the few fixed operation names (extract_facts, decide,
    summarize_episode, synthesize, embed); `result` is an `Outcome` label, so a
    falling success rate or a growing fallback share is visible per operation.
    """

    RESULTS = (
        "ok",
        "repaired",
        "invalid_output",
        "timeout",
        "rate_limited",
        "server_error",
        "unavailable",
        "client_error",
    )

    LATENCY = Histogram(
        "memstream_llm_request_seconds",
        "One HTTP request to the LLM or embeddings endpoint, retries counted separately",
        ["operation"],
        buckets=_LLM_BUCKETS,
    )
    TOKENS = Counter("memstream_llm_tokens_total", "Tokens the endpoint reported as used", ["operation", "kind"])
    OUTCOMES = Counter(
        "memstream_llm_outcomes_total", "Final result of one LLM operation call", ["operation", "result"]
    )
    RETRIES = Counter(
        "memstream_llm_retries_total", "Requests retried after a transient failure", ["operation", "cause"]
    )

    @classmethod
    def declare(cls, operation: str) -> None:
        """Zero series up front, so a fallback rate that never fired reads 0, not "no data"."""
        for result in cls.RESULTS:
            cls.OUTCOMES.labels(operation=operation, result=result)
        for kind in ("prompt", "completion"):
            cls.TOKENS.labels(operation=operation, kind=kind)


def set_generations(serving: dict[str, bool], lags: dict[str, int | None]) -> None:
    """Every generation's series, and only theirs (a dropped generation's series go)."""
    GENERATION_SERVING.clear()
    GENERATION_LAG.clear()
    for name, on in serving.items():
        GENERATION_SERVING.labels(generation=name).set(1 if on else 0)
    for name, lag in lags.items():
        if lag is not None:
            GENERATION_LAG.labels(generation=name).set(lag)


def declare_stage(stage: str) -> None:
    """Create a stage's zero-valued series up front.

    A labelled counter has no series until first incremented, so an error
    rate that never fired would show "no data" instead of 0.
    """
    EVENTS_IN.labels(stage=stage)
    STAGE_ERRORS.labels(stage=stage)
    for reason in ("processing_error", "store_rejected"):
        DLQ.labels(stage=stage, reason=reason)
