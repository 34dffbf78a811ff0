"""The one settings object of a process, built in `main()` and passed down."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, ValidationInfo, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    """Every address, path, limit and model; env prefix `MEMSTREAM_`."""

    model_config = SettingsConfigDict(env_prefix="MEMSTREAM_", frozen=True, extra="ignore")

    # Where the embedded stack keeps its state.
    data_dir: Path = Path(".memstream")
    # The topics, partitions and retention `memstream topics create` declares; the embedded log enforces its
    # retention, and `rebuild generation` creates a generation's topics from it.
    topics_file: Path = Path("topics.yaml")

    # The Kafka broker(s) every stage, the read service and the CLI connect to (host:port, comma-separated).
    kafka_bootstrap: str = "127.0.0.1:9092"
    # Prefix of every stage's consumer group and Faust app id (`<app_id>-<stage>`); give each deployment
    # sharing one broker its own. A generation derives its own from it.
    app_id: str = "memstream"
    # Consumer offsets are committed this often (seconds).
    commit_interval: float = 1.0
    # Seconds without a heartbeat before the broker moves a worker's partitions to the others (also the
    # rebalance timeout): lower fails over faster, higher tolerates longer stalls.
    group_session_timeout: float = 10.0
    # How long the broker may hold an empty fetch; bounds each hop's latency. 50 ms: a turn crosses four
    # hops before recall finds it; an idle embedded stack measured ~0.05 core more than at 100 ms.
    fetch_max_wait_ms: int = 50

    # No password here: the embedded stack's generated one is joined from data_dir/pgpass (see below).
    pg_dsn: str = Field("postgresql://memstream@127.0.0.1:5433/memstream", validate_default=True)
    # Most connections a Postgres pool opens (one pool per process, and per generation the read service serves);
    # raise it when requests or batches queue for a connection.
    pg_pool_size: int = 4
    # Seconds to open a connection: an outage
    # must surface fast (StoreUnavailable), not hang a request or a batch.
    pg_connect_timeout: float = 2.0
    # Seconds to wait for a free pooled connection, short for the same reason.
    pg_pool_timeout: float = 2.0

    # None means the embedded Qdrant Edge shard under data_dir/qdrant.
    qdrant_url: str | None = None
    # Collection name on the Qdrant server (with qdrant_url only); a generation and a non-MiniLM
    # embedding model each add a suffix, so they never share points.
    qdrant_collection: str = "memories"
    # Qdrant server's API key (its service.api_key), sent with every request; never logged.
    qdrant_api_key: SecretStr | None = None

    # Address the read service (HTTP API) listens on, and a worker's metrics endpoint; 0.0.0.0 for other hosts.
    http_host: str = "127.0.0.1"
    # Port of the read service's HTTP API (and its /metrics).
    http_port: int = 8080
    # Larger request bodies (bytes) get 413.
    http_max_body_bytes: int = 1024 * 1024
    # Seconds a /v1 request may take; a request taking longer gets 503 (exports and imports have their own).
    http_request_timeout: float = 2.0
    # A request whose head and body have not all arrived this many seconds after its first byte gets 408, closed.
    http_read_timeout: float = 30.0
    # Seconds an idle keep-alive connection stays open. Longer than clients keep theirs (httpx: 5 s), so the
    # client closes first: a server closing at the same moment a client reuses the connection loses that request.
    http_keep_alive_timeout: float = Field(75.0, gt=0)
    # Seconds /readyz may take; its Kafka, Postgres and Qdrant probes get 80% of it, a slower one counts as down.
    readyz_timeout: float = 1.0
    # Prometheus metrics port of a worker process without the read service (which serves /metrics itself).
    worker_metrics_port: int = 9464

    # Tokens a session's working window may hold before older turns are evicted (to be summarised).
    window_max_tokens: int = 12_000
    # Turns a session's working window may hold before older turns are evicted.
    window_max_turns: int = 20
    # The newest turns never evicted (nor the first), even over the limits; recall's context comes from them.
    window_keep_last: int = 3
    # A window over a limit is trimmed to this share of both: evicted turns leave in runs (agents/window/logic.py).
    window_trim_to: float = Field(0.5, gt=0, le=1)
    # Each session's limits are lowered by its own share of this, fixed per session, so that sessions
    # started together do not all trim on the same turn (agents/window/logic.WindowLimits).
    window_trim_jitter: float = Field(0.25, ge=0, lt=1)
    # Turns per window-stage transaction.
    window_batch_size: int = 64
    # Seconds a window-stage batch may wait to fill. The waits of the window,
    # embedder and consolidator (0.05 s each) make a trickle of turns arrive in batches of a few: each batch
    # costs a transaction and a wait for the broker whatever its size (docs/benchmarks.md). Each wait is
    # on a turn's way to recall, so they are short: at 0.1 s freshness p50 was ~0.15 s longer at 20 turns/s.
    window_batch_within: float = 0.05

    # Largest turn content in bytes (after normalisation): larger is refused (422 at POST /v1/turns, DLQ
    # as oversized in the window stage).
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

    # Directory of the MiniLM ONNX model; unset = the one packaged with memstream.
    embed_model_dir: Path | None = None
    # Texts per embedder-stage batch and per model call (or per request to embed_base_url).
    embed_batch_size: int = 64
    # Seconds an embedder-stage batch may wait to fill.
    embed_batch_within: float = 0.05
    # Derived candidates (episodes and questions of closed sessions) per model call; they are embedded after
    # fresh ones (agents/embedder/lanes.py), so a fresh batch waits for at most one such call.
    embed_background_batch: int = Field(8, ge=1)
    # Derived candidates the embedder holds at most; when full it takes no new batch until some are embedded.
    embed_background_queue: int = Field(1024, ge=1)
    # Vectors a process keeps by text (LRU) so repeated texts skip the model; ~1.5 KB each with MiniLM.
    embed_cache_size: int = 50_000
    # CPU threads the MiniLM model uses per call (ONNX intra-op threads).
    embed_threads: int = 2
    # int8 MiniLM: about twice the texts per CPU second, vectors within cosine ~0.995 of float32 (docs/concepts/pipeline.md).
    embed_quantized: bool = True
    # Recall's query vectors kept by exact text (services/embedding/query_cache.py); ~1.5 KB each with MiniLM.
    query_cache_size: int = Field(10_000, ge=0)
    # The garbage collector's youngest-generation threshold in the worker and read-service processes
    # (Python's default is 700; services/process/runner.py says why it is higher).
    gc_young_threshold: int = Field(20_000, ge=700)
    # How long a thread waits, at most, for the GIL a busy thread holds (Python's default is 5 ms).
    gil_switch_interval_ms: float = Field(1.0, gt=0, le=100)

    # Records per batch of the consolidator, commands and index stages (and the read service's index follower).
    consolidate_batch_size: int = 256
    # Seconds a consolidator or commands batch may wait to fill.
    consolidate_batch_within: float = 0.05
    # The index sink's batches cost little whatever their size: a short wait keeps the last hop to recall short.
    index_batch_within: float = 0.02

    # Evicted chunks per summarizer batch (one send and one wait for the broker); 1 with an LLM configured.
    summarize_batch_size: int = Field(16, ge=1)
    # Seconds a summarizer batch may wait to fill.
    summarize_batch_within: float = 0.1
    # Sentences an extractive episode summary keeps from the evicted turns.
    summary_max_sentences: int = 3

    # Recall gives way to ingest (services/api/read_gate.py): a stage batch whose oldest event waited longer
    # than this means the stages are behind, and recall's share of the process is halved; it grows back while
    # no batch is late. The share never goes below the floor; a floor of 1 turns the gate off. No recall waits
    # for its turn longer than read_gate_max_wait. A hop of an idle pipeline waits ~0.1-0.3 s (batch window
    # plus fetch), so 0.25 s trips now and then without read load, and reacts half as late as 0.5 s did.
    ingest_behind_seconds: float = Field(0.25, gt=0)
    read_share_floor: float = Field(0.05, gt=0, le=1)
    read_gate_max_wait: float = Field(0.25, ge=0)

    # Memories a recall returns when its request gives no `top_k` (a request may ask for 1-100).
    recall_top_k: int = Field(10, ge=1, le=100)
    # Tokens the recall's `prompt` block may take when the request gives no `token_budget` (1-64,000).
    recall_token_budget: int = Field(2_000, ge=1, le=64_000)
    # Fused hits each recall ranks (at least 3 x top_k) before packing the answer; more finds lower-scored
    # hits that ranking lifts, at some cost per request.
    recall_candidates: int = 50
    # --- recall quality (docs/usage/recall.md). Defaults tuned on the LoCoMo dev set. ---
    # Hits taken from each index leg (own dense, own BM25, context dense, context BM25) before fusion (top_k
    # if larger); min-max normalisation is over this list, so it is fixed, not tied to top_k.
    recall_leg_depth: int = 50
    # Score fusion of the recall legs (services.stores.fusion): dense share of each pair of legs.
    recall_dense_weight: float = 0.4
    # Score fusion of the recall legs: BM25 share of each pair of legs.
    recall_sparse_weight: float = 0.6
    # The context pair's weight against the own pair's (1.0: as much) (fusion.py).
    recall_context_weight: float = 1.0
    # The session cue's weight (fusion.py): lifts hits from the conversation that best matches the query.
    recall_session_weight: float = 0.4
    # BM25 document weights (services.stores.vector.Bm25Params); changing them needs `memstream rebuild index`.
    # k1: how fast repeats of a term stop adding weight.
    recall_bm25_k1: float = 1.2
    # BM25 length normalisation b (0: none, 1: full); needs `memstream rebuild index` too.
    recall_bm25_b: float = 0.4
    # A memory's own text's average length in tokens (after stopwords), for BM25; needs `memstream rebuild index`.
    recall_bm25_avg_len: float = 15.0
    # How many times avg_len a context document (a text with its preceding turns) is taken to be; needs a rebuild.
    recall_bm25_context_factor: float = 3.0
    # The ranking signals after fusion (services.api.ranking.Weights): the fused similarity's weight.
    recall_weight_similarity: float = 0.40
    # Recency's weight: 1 for a memory last seen (observed or recalled) now, halving every 180 days.
    recall_weight_recency: float = 0.05
    # The weight of the memory's importance (0 to 1; maintenance decays it).
    recall_weight_importance: float = 0.20
    # The weight of how often recall returned the memory (log-scaled, 1 at 50 recalls).
    recall_weight_access: float = 0.10
    # The weight of the query naming one of the memory's entities (1 if it does, else 0).
    recall_weight_entity: float = 0.02
    # Access marks are coalesced per memory over this window (one mark: a count and the last access).
    access_flush_seconds: float = Field(5.0, gt=0, le=3600)
    # MiniLM cosine above which a fact or preference is pinned ahead of the rest.
    profile_min_similarity: float = 0.5

    # --- tending memory ---
    # Cosine at or above which a candidate merges into an active memory of its type.
    merge_similarity: float = 0.92
    # Candidates below this importance are not stored on their own (facts and preferences always are).
    min_importance: float = 0.3
    # Seconds between maintenance passes (decay, prune, patterns, topics, questions) over every user.
    maintenance_interval: float = 6 * 3600.0
    # Days over which an unseen memory's importance halves, counted past decay_after_days (per day, not per
    # pass: the pass interval does not change how fast memory fades).
    decay_half_life_days: float = Field(180.0, gt=0)
    # Days a memory must go unseen (neither observed nor recalled) before passes decay it.
    decay_after_days: float = 7.0
    # A memory whose importance (after decay) is below this and unseen for prune_after_days is pruned.
    prune_below: float = 0.1
    # Days a low-importance memory must go unseen before it is pruned.
    prune_after_days: float = 30.0
    # Patterns (agents/maintenance/rules/patterns.py, chosen on tests/bench/patterns.py): at least this many
    # episodes become one pattern memory.
    pattern_min_episodes: int = 5
    # Patterns: episodes cluster while their mean cosine is this many standard deviations above the user's
    # typical pair of episodes.
    pattern_spread: float = 1.0
    # Patterns: the user's pairs are pooled with this many pairs of unrelated episodes (the prior of a short history).
    pattern_prior_pairs: float = 200.0
    # Days back from a topic term's latest episode within which its episodes count towards a semantic topic.
    semantic_window_days: float = 90.0
    # An open question recall surfaced this often is deferred (no longer surfaced).
    question_max_surfaced: int = 3
    # An open question open this long (days) is deferred too.
    question_defer_days: float = 30.0
    # A session with no turn for this long is closed as if session_end had arrived.
    session_idle: float = 1800.0
    # Seconds between looks for idle sessions to close (the default generation only); bounds how late they close.
    # Short, so that sessions close a few at a time as they go idle: a session_end is window, summarizer and
    # consolidator work on the turns' own path, and closing 5 s' worth at once (~100 sessions in bench-soak)
    # held the turns behind them ~1-2 s (60 s' worth, before that, longer). The check reads a partial index.
    session_idle_check_seconds: float = 1.0

    # --- optional LLM path; unset base URL = no LLM anywhere ---
    # An OpenAI-compatible chat API the summarizer, consolidator and maintenance then use; unset, rules alone decide.
    llm_base_url: str | None = None
    # The chat model named in every LLM request.
    llm_model: str = "gpt-4o-mini"
    # Bearer key for the LLM API and for embed_base_url; the default suits local servers that want none.
    llm_api_key: str = "unused"
    # Seconds one request to the LLM API (or to embed_base_url) may take before it times out.
    llm_timeout: float = 20.0
    # LLM requests one process has in flight at once; the rest wait for a slot.
    llm_concurrency: int = 4
    # Retries of a transient LLM failure (timeout, 408, 429, 5xx, connection) before the request fails.
    llm_max_retries: int = 2
    # The LLM decides over neighbours at least this similar; a candidate with none is added without a request.
    llm_decide_min_similarity: float = 0.5
    # OpenAI-compatible embeddings instead of the packaged MiniLM.
    embed_base_url: str | None = None
    # The model named in each request to embed_base_url; it and the dimension name the index collection.
    embed_model: str = "text-embedding-3-small"
    # Vector length embed_base_url's model returns, checked on every answer.
    embed_dimension: int = 1536

    # --- authentication (services/auth) ---
    # "disabled" opens every /v1 route to anyone who can reach the port: local experiments only (warned at start).
    auth: Literal["enabled", "disabled"] = "enabled"
    # Secret of the keyed API-key hash; unset = data_dir/auth-secret, generated on first use (0600).
    # Processes that create or check keys without sharing a data dir must all be given the same one.
    auth_secret: SecretStr | None = None
    # A verified (or refused) key is remembered this long: a revocation takes effect within it everywhere.
    auth_cache_seconds: float = 5.0
    # A key's last_used_at is written at most this often, in the background.
    auth_touch_seconds: float = 60.0
    # The key memstream's own clients send (memstream recall, mcp, ...); unset = data_dir/api-key.
    api_key: SecretStr | None = None

    # --- MCP server (services/mcp_server.py) ---
    # The memstream HTTP API the MCP tools call; unset = this machine's read service (http_host:http_port).
    api_url: str | None = None
    # Tenant every tool call acts for (`memstream mcp --tenant`).
    mcp_tenant: str | None = None
    # User every tool call acts for (`memstream mcp --user`).
    mcp_user: str | None = None
    # Let the model name tenant_id / user_id in each tool call instead of binding them (`--allow-any-user`).
    mcp_allow_any_user: bool = False
    # Where `memstream mcp --http` listens (streamable HTTP at /mcp).
    mcp_host: str = "127.0.0.1"
    # The port `memstream mcp --http` listens on (`--port`).
    mcp_port: int = 8765

    # --- HTTP ingest (services/api/ingest.py) ---
    # Seconds POST /v1/turns waits for the broker's acknowledgement of every event before answering 503
    # (also librdkafka's message timeout there); keep it below http_request_timeout.
    ingest_ack_timeout: float = 1.5

    # --- Kafka and Postgres credentials (services/core/kafka_auth.py, services/core/pgpass.py) ---
    # Setting the mechanism makes every Kafka client memstream creates (Faust app, aiokafka, confluent-kafka)
    # authenticate with SASL over plaintext, and makes `memstream up` require it of every client (ops/kafka_gate.py).
    kafka_sasl_mechanism: Literal["SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"] | None = None
    # The SASL user memstream's Kafka clients log in as; needed with the mechanism (`memstream up` registers it).
    kafka_sasl_username: str | None = None
    # That user's password; never logged.
    kafka_sasl_password: SecretStr | None = None
    # Seconds the embedded broker's SCRAM gate gives a new connection to authenticate before closing it.
    kafka_gate_auth_deadline: float = 10.0

    @model_validator(mode="after")
    def _sasl_complete(self) -> Settings:
        """A mechanism without its user would fail at the first connection, deep in a client: fail here."""
        if self.kafka_sasl_mechanism and not (self.kafka_sasl_username and self.kafka_sasl_password):
            raise ValueError("MEMSTREAM_KAFKA_SASL_MECHANISM needs MEMSTREAM_KAFKA_SASL_USERNAME and _PASSWORD")
        return self

    @field_validator("pg_dsn")
    @classmethod
    def _embedded_pg_password(cls, dsn: str, info: ValidationInfo) -> str:
        """Every process (app, CLI, tests) reaches the embedded Postgres with the password `up` generated.

        Only a DSN naming no password of its own, and only once data_dir/pgpass
        exists; the DSN then names the file, never the secret, so it is safe to log.
        """
        from services.core.pgpass import with_passfile

        return with_passfile(dsn, Path(info.data.get("data_dir", Path(".memstream"))))

    # --- memory commands (services/api/command_routes.py, services/api/transfer_routes.py, agents/consolidator/commands.py) ---
    # Seconds a command may wait for the broker's acknowledgement before the route answers 503.
    command_ack_timeout: float = 1.5
    # `?wait=true`: seconds to wait for a command to show in Postgres and the index before answering 202
    # instead of 200; such a request's deadline is http_request_timeout plus this.
    command_wait_timeout: float = 5.0
    # The deadline of an export or import (a whole user's data), instead of http_request_timeout.
    http_transfer_timeout: float = 30.0
    # The deadline of /v1/ops routes, instead of http_request_timeout: each reads Kafka with a consumer of its
    # own (connect, metadata, a fetch per partition), seconds on a busy machine.
    http_ops_timeout: float = Field(8.0, gt=0)

    # --- encrypted archive (services/archive) ---
    # Base64 of 32 random bytes; wraps every user's data key (table user_keys). Unset = data_dir/master-key,
    # which `memstream up` generates (0600) at its first start. Every process that writes or reads
    # memory.archive must have the same one: losing it makes the whole archive unreadable.
    master_key: SecretStr | None = None
    # Unwrapped data keys a process keeps; each batch still checks Postgres, so a forgotten user's key is not used.
    archive_key_cache_size: int = 10_000
    # The archive reader stops once it has passed the end offsets reported at its start and then
    # `archive_idle_seconds` go by with no record (tansu under-reports the end: see services/archive/reader.py).
    archive_idle_seconds: float = 2.0
    # ... and gives up (StoreUnavailable) when no record arrives this long before it reached those offsets.
    archive_stall_seconds: float = 60.0

    # --- stages that scale apart (services/core/stages.py, ops/embedded/app.py) ---
    # Worker processes `memstream up` runs. 1: one process runs every stage and the read service.
    # N > 1: the read service with the index stage (the Qdrant Edge shard's one owner) in one process,
    # and N processes running every other stage, each stage one consumer group shared by the N.
    # Worker i (1-based) serves its metrics on worker_metrics_port + i - 1.
    workers: int = Field(1, ge=1, le=16)
    # Read replicas `memstream up` runs (and `memstream serve` without --replicas). 0: the read service lives
    # in the app process and shares the index stage's Qdrant Edge shard. N >= 1: N read-service processes on
    # one port (SO_REUSEPORT), each with its own shard fed from memory.changes (services/api/replica.py), and
    # the stages in worker processes. With a Qdrant server the replicas share its collection instead.
    read_replicas: int = Field(0, ge=0, le=16)
    # Set by `memstream serve --replicas N` for each of its processes: this one is replica i (1-based).
    replica: int | None = Field(None, ge=1, le=16)
    # Niceness a read replica adds to itself: when reads and ingest compete for the cores, the stages (and so
    # freshness) come first, and recall takes what they leave. 0: equal shares.
    read_replica_nice: int = Field(10, ge=0, le=19)
    # Seconds after which a replica that has not reported its position is no longer waited for by ?wait=true.
    replica_stale_seconds: float = Field(10.0, gt=0)
    # Replicas keep an even share of the port's connections: one over its share answers with `connection: close`
    # and the client reconnects wherever the kernel places it (services/api/balance.py). False: the kernel's hash.
    replica_balance: bool = True

    # --- a durable embedded log (ops/embedded/broker.py, ops/s3store.py) ---
    # Where `memstream up`'s tansu keeps topics and consumer offsets. s3: files under data_dir/kafka, served by
    # ops/s3store.py, kept across restarts. memory: gone when the broker stops (topics declared again at start).
    kafka_storage: Literal["s3", "memory"] = "s3"

    # --- generations (services/core/generations.py, services/cli/rebuild.py) ---
    # The generation this process runs in (its schema, topics, consumer groups and index); unset = the default
    # generation, today's names. `main()` derives the rest from it (services.core.generations.scoped).
    generation: str | None = None
    # The Qdrant Edge shard directory; unset = data_dir/qdrant. A generation's processes get their own.
    qdrant_dir: Path | None = None
    # Seconds between the read service's looks at which generation serves (public.generations).
    generation_refresh_seconds: float = 2.0
    # Set by `rebuild generation` for its first phase: the commands stage leaves the archive's commands alone
    # until its chat events are through, so a user's delete or correction meets the memory it names.
    hold_commands: bool = False

    # Fault tests only: {"window.after_commit": 5} kills the process there (services/core/faults.py).
    crash_points: dict[str, int] = {}

    # Seconds between refreshes of the memory-count gauges (by the leader alone: a Postgres count).
    gauge_refresh_seconds: float = 15.0
    # Seconds between refreshes of each stage's consumer-lag and assigned-partition gauges.
    lag_refresh_seconds: float = 5.0
    # Log level of memstream's stages and CLI (debug, info, warning, error).
    log_level: str = "info"

    @property
    def shard_root(self) -> Path:
        """Where this process's Qdrant Edge shards live: a read replica keeps its own beside the others."""
        return self.data_dir if self.replica is None else self.data_dir / "replicas" / f"r{self.replica}"

    @property
    def replica_name(self) -> str | None:
        return None if self.replica is None else f"r{self.replica}"

    @property
    def qdrant_path(self) -> Path:
        return self.qdrant_dir or self.shard_root / "qdrant"

    @property
    def pg_data(self) -> Path:
        return self.data_dir / "pg"

    @property
    def http_base_url(self) -> str:
        return f"http://{self.http_host}:{self.http_port}"

    @property
    def api_base_url(self) -> str:
        """The HTTP API memstream's own clients call: MEMSTREAM_API_URL, else the local read service."""
        return (self.api_url or self.http_base_url).rstrip("/")
