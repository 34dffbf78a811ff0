"""Postgres, the source of truth, split by concern over one shared pool.

- `PgPool`: connections, timeouts and the outage / bad-data classification;
- `WindowStore`: raw turns and working windows (window stage, read service);
- `Outbox`: messages committed with the state they follow;
- `MemoryWriter`: the consolidator's lookups and upserts;
- `MemoryReader`: the read service's scoped queries;
- `SummaryStore`: the rolling per-session summary of LLM fact extraction;
- `CorpusCounts`: per-tenant counts of assistant turns' terms, which summaries weigh words against;
- `migrate`: schema migrations.
"""

from services.stores.postgres.corpus import CorpusCounts
from services.stores.postgres.memory_reads import MemoryReader
from services.stores.postgres.memory_writes import MemoryWriter
from services.stores.postgres.migrations import migrate
from services.stores.postgres.outbox import Outbox, OutboxMessage
from services.stores.postgres.pool import Conn, PgPool
from services.stores.postgres.records import record_from_row
from services.stores.postgres.summaries import ChunkMark, SessionSummary, SummaryStore
from services.stores.postgres.windows import Archived, SessionWindow, WindowStore

__all__ = [
    "Archived",
    "ChunkMark",
    "Conn",
    "CorpusCounts",
    "MemoryReader",
    "MemoryWriter",
    "Outbox",
    "OutboxMessage",
    "PgPool",
    "SessionSummary",
    "SessionWindow",
    "SummaryStore",
    "WindowStore",
    "migrate",
    "record_from_row",
]
