"""The one settings object of a process, built in `main()` and passed down."""

from __future__ import annotations

from pathlib import Path

from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    """Every address, path, limit and model; env prefix `MEMSTREAM_`."""

    model_config = SettingsConfigDict(env_prefix="MEMSTREAM_", frozen=True, extra="ignore")

    # Where the embedded stack keeps its state.
    data_dir: Path = Path(".memstream")
    topics_file: Path = Path("topics.yaml")

    kafka_bootstrap: str = "127.0.0.1:9092"
    app_id: str = "memstream"
    # Consumer offsets are committed this often (seconds).
    commit_interval: float = 1.0
    group_session_timeout: float = 10.0
    # How long the broker may hold an empty fetch; bounds each hop's latency.
    fetch_max_wait_ms: int = 100

    pg_dsn: str = "postgresql://memstream@127.0.0.1:5433/memstream"
    pg_pool_size: int = 4
    # Seconds to open a connection / wait for a free pooled one: an outage
    # must surface fast (StoreUnavailable), not hang a request or a batch.
    pg_connect_timeout: float = 2.0
    pg_pool_timeout: float = 2.0

    # None means the embedded Qdrant Edge shard under data_dir/qdrant.
    qdrant_url: str | None = None
    qdrant_collection: str = "memories"

    http_host: str = "127.0.0.1"
    http_port: int = 8080
    # Larger request bodies get 413; a request taking longer gets 503.
    http_max_body_bytes: int = 1024 * 1024
    http_request_timeout: float = 2.0
    readyz_timeout: float = 1.0
    worker_metrics_port: int = 9464

    window_max_tokens: int = 12_000
    window_max_turns: int = 20
    window_keep_last: int = 3
    # Turns per window-stage transaction, and how long a batch may wait to fill.
    window_batch_size: int = 64
    window_batch_within: float = 0.02

    max_content_bytes: int = 64 * 1024
    # Largest message memstream produces (Kafka's default limit is 1 MiB):
    # evicted chunks are split below it, DLQ copies truncated to it.
    max_message_bytes: int = 900 * 1024
    # Longest wait between retries of a batch while a store is down.
    retry_max_backoff: float = 30.0
    # Outbox rows older than this are sent by the relay timer (a crash left them).
    outbox_relay_seconds: float = 30.0
    # When set, events of any other tenant go to the DLQ as unknown_tenant.
    tenants: frozenset[str] | None = None

    embed_model_dir: Path | None = None
    embed_batch_size: int = 64
    embed_batch_within: float = 0.05
    embed_cache_size: int = 50_000
    embed_threads: int = 2

    consolidate_batch_size: int = 256
    consolidate_batch_within: float = 0.05

    summary_max_sentences: int = 3

    recall_top_k: int = 10
    recall_token_budget: int = 2_000
    recall_candidates: int = 50
    # Score fusion of the recall legs (services.stores.fusion): dense and BM25 shares.
    recall_dense_weight: float = 0.4
    recall_sparse_weight: float = 0.6
    # MiniLM cosine above which a fact or preference is pinned ahead of the rest.
    profile_min_similarity: float = 0.5

    # --- tending memory (issue 8) ---
    # Cosine at or above which a candidate merges into an active memory of its type.
    merge_similarity: float = 0.92
    # Candidates below this importance are not stored on their own (facts and preferences always are).
    min_importance: float = 0.3
    maintenance_interval: float = 6 * 3600.0
    decay_rate: float = 0.05
    decay_after_days: float = 7.0
    prune_below: float = 0.1
    prune_after_days: float = 30.0
    pattern_min_episodes: int = 5
    semantic_window_days: float = 90.0
    # An open question recall surfaced this often, or open this long, is deferred (no longer surfaced).
    question_max_surfaced: int = 3
    question_defer_days: float = 30.0
    # A session with no turn for this long is closed as if session_end had arrived.
    session_idle: float = 1800.0
    session_idle_check_seconds: float = 60.0

    # --- optional LLM path; unset base URL = no LLM anywhere ---
    llm_base_url: str | None = None
    llm_model: str = "gpt-4o-mini"
    llm_api_key: str = "unused"
    llm_timeout: float = 20.0
    llm_concurrency: int = 4
    llm_max_retries: int = 2
    # The LLM decides over neighbours at least this similar; a candidate with none is added without a request.
    llm_decide_min_similarity: float = 0.5
    # OpenAI-compatible embeddings instead of the packaged MiniLM.
    embed_base_url: str | None = None
    embed_model: str = "text-embedding-3-small"
    embed_dimension: int = 1536

    # Fault tests only: {"window.after_commit": 5} kills the process there (services/faults.py).
    crash_points: dict[str, int] = {}

    gauge_refresh_seconds: float = 15.0
    lag_refresh_seconds: float = 5.0
    log_level: str = "info"

    @property
    def qdrant_path(self) -> Path:
        return self.data_dir / "qdrant"

    @property
    def pg_data(self) -> Path:
        return self.data_dir / "pg"

    @property
    def http_base_url(self) -> str:
        return f"http://{self.http_host}:{self.http_port}"
