"""Maintenance's queries: whose memories to tend, one user's rows locked with their vectors, idle sessions,
and the questions still awaiting an answer (open, or deferred by maintenance).

Writes go through `MemoryWriter.upsert`, like the consolidator's, in a transaction that took the user's lock
first (services/stores/postgres/locks.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from schemas import MemoryRecord
from services.stores.postgres.pool import Conn, PgPool
from services.stores.postgres.records import RECORD_COLUMNS, record_from_row, vector_floats


@dataclass(frozen=True)
class UserRows:
    records: list[MemoryRecord]
    vectors: dict[str, list[float] | None]
    # Ids of the user's pattern and semantic rows in any status: already written.
    synthesized: set[str]


@dataclass(frozen=True)
class IdleSession:
    tenant_id: str
    user_id: str
    session_id: str
    last_turn_at: datetime


async def users_with_active_memories(pool: PgPool, tenant_id: str | None, user_id: str | None) -> list[tuple[str, str]]:
    async with pool.connection("maintenance_users") as conn:
        cur = await conn.execute(
            """SELECT DISTINCT tenant_id, user_id FROM memories
               WHERE status = 'active' AND (%(t)s::text IS NULL OR tenant_id = %(t)s)
                 AND (%(u)s::text IS NULL OR user_id = %(u)s)
               ORDER BY tenant_id, user_id""",
            {"t": tenant_id, "u": user_id},
        )
        return [(r["tenant_id"], r["user_id"]) for r in await cur.fetchall()]


async def load_user(conn: Conn, tenant_id: str, user_id: str) -> UserRows:
    """The user's active memories and their vectors, locked until the transaction ends."""
    cur = await conn.execute(
        f"""SELECT {RECORD_COLUMNS}, embedding FROM memories
            WHERE tenant_id = %s AND user_id = %s AND status = 'active' ORDER BY id FOR UPDATE""",
        (tenant_id, user_id),
    )
    rows = await cur.fetchall()
    records = [record_from_row(r) for r in rows]
    vectors = {r["id"]: vector_floats(r["embedding"]) for r in rows}
    cur = await conn.execute(
        "SELECT id FROM memories WHERE tenant_id = %s AND user_id = %s AND type IN ('pattern', 'semantic')",
        (tenant_id, user_id),
    )
    return UserRows(records, vectors, {r["id"] for r in await cur.fetchall()})


# Read through the partial index of open sessions (migration 016): closed sessions stay in the table.
IDLE_SESSIONS = """SELECT tenant_id, user_id, session_id, last_turn_at FROM sessions
                   WHERE closed_at IS NULL AND last_turn_at < %s ORDER BY last_turn_at LIMIT %s"""


async def idle_sessions(pool: PgPool, before: datetime, limit: int = 1000) -> list[IdleSession]:
    """Open sessions whose last turn is older than `before`, oldest first."""
    async with pool.connection("idle_sessions") as conn:
        cur = await conn.execute(IDLE_SESSIONS, (before, limit))
        return [
            IdleSession(r["tenant_id"], r["user_id"], r["session_id"], r["last_turn_at"]) for r in await cur.fetchall()
        ]


async def unanswered_questions(
    conn: Conn, scopes: Sequence[tuple[str, str]]
) -> list[tuple[MemoryRecord, list[float] | None]]:
    """Active `question` memories of these users still awaiting an answer, with their vectors, locked for the batch.

    Open and deferred alike: deferral only stops recall surfacing a question,
    a later answer still resolves it (the consolidator's `resolve_questions`).
    """
    if not scopes:
        return []
    cur = await conn.execute(
        f"""SELECT {RECORD_COLUMNS}, embedding FROM memories
            WHERE (tenant_id, user_id) IN (SELECT * FROM unnest(%s::text[], %s::text[]))
              AND type = 'question' AND status = 'active' AND question->>'state' IN ('open', 'deferred')
            ORDER BY observed_at, id FOR UPDATE""",
        ([t for t, _ in scopes], [u for _, u in scopes]),
    )
    return [(record_from_row(r), vector_floats(r["embedding"])) for r in await cur.fetchall()]
