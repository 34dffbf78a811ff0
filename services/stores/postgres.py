"""Postgres: the source of truth for turns, windows and long-term memory.

Every read takes tenant and user; there is deliberately no query by memory id
alone.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from importlib import resources
from typing import Any

import numpy as np
import orjson
from pgvector.psycopg import register_vector_async
from psycopg import AsyncConnection
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from schemas import MemoryRecord, MemoryStatus, MemoryType, Provenance, TurnEvent
from services import metrics
from services.errors import StoreError

Conn = AsyncConnection[dict[str, Any]]
_MIGRATION_LOCK = 7_351_001

_RECORD_COLUMNS = """id, tenant_id, user_id, type, text, content_hash, category, key_name, value, importance,
confidence, status, observed_at, created_at, updated_at, superseded_at, superseded_by, provenance, entities,
access_count, reinforcement_count, version"""


def record_from_row(row: dict[str, Any]) -> MemoryRecord:
    """A record from a row holding at least _RECORD_COLUMNS; extra computed columns are ignored."""
    fields = {k: row[k] for k in MemoryRecord.model_fields if k in row}
    return MemoryRecord(source=Provenance.model_validate(row["provenance"]), **fields)


def _migrations() -> list[tuple[int, str]]:
    folder = resources.files("services.stores") / "migrations"
    found = [(int(f.name.split("_", 1)[0]), f.read_text()) for f in folder.iterdir() if f.name.endswith(".sql")]
    return sorted(found)


async def migrate(dsn: str) -> list[int]:
    """Apply pending migrations under an advisory lock, so concurrent starts are safe."""
    applied: list[int] = []
    async with await AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute("SELECT pg_advisory_lock(%s)", (_MIGRATION_LOCK,))
        try:
            await conn.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations (version integer PRIMARY KEY, applied_at timestamptz DEFAULT now())"
            )
            cur = await conn.execute("SELECT version FROM schema_migrations")
            done = {r[0] for r in await cur.fetchall()}
            for version, sql in _migrations():
                if version in done:
                    continue
                async with conn.transaction():
                    await conn.execute(sql.encode())
                    await conn.execute("INSERT INTO schema_migrations (version) VALUES (%s)", (version,))
                applied.append(version)
        finally:
            await conn.execute("SELECT pg_advisory_unlock(%s)", (_MIGRATION_LOCK,))
    return applied


class PostgresStore:
    def __init__(self, dsn: str, pool_size: int) -> None:
        self._pool: AsyncConnectionPool[Conn] = AsyncConnectionPool(
            dsn,
            min_size=1,
            max_size=pool_size,
            open=False,
            kwargs={"row_factory": dict_row},
            configure=self._configure,
        )

    @staticmethod
    async def _configure(conn: Conn) -> None:
        await register_vector_async(conn)
        await conn.set_autocommit(True)

    async def open(self) -> None:
        await self._pool.open(wait=True, timeout=30)

    async def close(self) -> None:
        await self._pool.close()

    @asynccontextmanager
    async def connection(self, operation: str) -> AsyncIterator[Conn]:
        started = time.perf_counter()
        try:
            async with self._pool.connection() as conn:
                yield conn
        except StoreError:
            raise
        except Exception as exc:
            metrics.STORE_ERRORS.labels(store="postgres", operation=operation).inc()
            raise StoreError(f"postgres {operation} failed: {exc}") from exc
        finally:
            metrics.STORE_LATENCY.labels(store="postgres", operation=operation).observe(time.perf_counter() - started)

    @asynccontextmanager
    async def transaction(self, operation: str) -> AsyncIterator[Conn]:
        async with self.connection(operation) as conn, conn.transaction():
            yield conn

    async def ping(self) -> bool:
        async with self.connection("ping") as conn:
            await conn.execute("SELECT 1")
        return True

    # --- turns and windows -------------------------------------------------

    async def archive_turn(self, conn: Conn, turn: TurnEvent) -> None:
        await conn.execute(
            """INSERT INTO turns (tenant_id, user_id, event_id, session_id, turn_index, role, content, ts, metadata)
               VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING""",
            (
                turn.tenant_id,
                turn.user_id,
                turn.event_id,
                turn.session_id,
                turn.turn_index,
                turn.role.value,
                turn.content,
                turn.ts,
                Jsonb(turn.metadata),
            ),
        )

    async def load_window(
        self, conn: Conn, tenant_id: str, user_id: str, session_id: str
    ) -> tuple[list[TurnEvent], bool]:
        """The stored window and whether the session was closed."""
        cur = await conn.execute(
            "SELECT window_turns, closed_at FROM sessions WHERE tenant_id = %s AND user_id = %s AND session_id = %s FOR UPDATE",
            (tenant_id, user_id, session_id),
        )
        row = await cur.fetchone()
        if row is None:
            return [], False
        return [TurnEvent.model_validate(t) for t in row["window_turns"]], row["closed_at"] is not None

    async def save_window(
        self,
        conn: Conn,
        tenant_id: str,
        user_id: str,
        session_id: str,
        window: Sequence[TurnEvent],
        tokens: int,
        closed_at: datetime | None = None,
    ) -> None:
        payload = orjson.dumps([t.model_dump(mode="json") for t in window]).decode()
        last = max((t.ts for t in window), default=None)
        await conn.execute(
            """INSERT INTO sessions (tenant_id, user_id, session_id, window_turns, window_tokens, turn_count, last_turn_at, closed_at)
               VALUES (%s, %s, %s, %s::jsonb, %s, %s, %s, %s)
               ON CONFLICT (tenant_id, user_id, session_id) DO UPDATE SET
                 window_turns = EXCLUDED.window_turns, window_tokens = EXCLUDED.window_tokens,
                 turn_count = EXCLUDED.turn_count, last_turn_at = COALESCE(EXCLUDED.last_turn_at, sessions.last_turn_at),
                 closed_at = EXCLUDED.closed_at, updated_at = now()""",
            (tenant_id, user_id, session_id, payload, tokens, len(window), last, closed_at),
        )

    async def working_window(self, tenant_id: str, user_id: str, session_id: str) -> dict[str, Any] | None:
        async with self.connection("working_window") as conn:
            cur = await conn.execute(
                """SELECT session_id, window_turns, window_tokens, last_turn_at, closed_at FROM sessions
                   WHERE tenant_id = %s AND user_id = %s AND session_id = %s""",
                (tenant_id, user_id, session_id),
            )
            return await cur.fetchone()

    # --- memories: consolidator side --------------------------------------

    async def neighbours(
        self,
        conn: Conn,
        tenant_id: str,
        user_id: str,
        memory_id: str,
        type_: MemoryType,
        digest: str,
        fact_key: tuple[str, str] | None,
    ) -> dict[str, MemoryRecord]:
        """The rows a consolidation decision needs, in one round trip.

        Keys: "id" (same id, any status), "content" (active, same type and
        content hash), "fact" (the active fact with this category/key).
        """
        category, key_name = fact_key or (None, None)
        cur = await conn.execute(
            f"""SELECT 'id' AS hit, {_RECORD_COLUMNS} FROM memories
                    WHERE tenant_id = %(t)s AND user_id = %(u)s AND id = %(id)s
                UNION ALL (SELECT 'content', {_RECORD_COLUMNS} FROM memories
                    WHERE tenant_id = %(t)s AND user_id = %(u)s AND type = %(type)s AND content_hash = %(hash)s
                      AND status = 'active' LIMIT 1)
                UNION ALL SELECT 'fact', {_RECORD_COLUMNS} FROM memories
                    WHERE tenant_id = %(t)s AND user_id = %(u)s AND type = 'fact' AND category = %(cat)s
                      AND key_name = %(key)s AND status = 'active'""",
            {
                "t": tenant_id,
                "u": user_id,
                "id": memory_id,
                "type": type_.value,
                "hash": digest,
                "cat": category,
                "key": key_name,
            },
        )
        return {row["hit"]: record_from_row(row) for row in await cur.fetchall()}

    async def superseded_by(self, conn: Conn, tenant_id: str, user_id: str, memory_id: str) -> list[MemoryRecord]:
        cur = await conn.execute(
            f"SELECT {_RECORD_COLUMNS} FROM memories WHERE tenant_id = %s AND user_id = %s AND superseded_by = %s",
            (tenant_id, user_id, memory_id),
        )
        return [record_from_row(r) for r in await cur.fetchall()]

    async def upsert(self, conn: Conn, record: MemoryRecord, vector: Sequence[float] | None) -> None:
        embedding = None if vector is None else np.asarray(vector, dtype=np.float32)
        await conn.execute(
            f"""INSERT INTO memories ({_RECORD_COLUMNS}, source_session_id, embedding)
                VALUES ({", ".join(["%s"] * 24)})
                ON CONFLICT (id) DO UPDATE SET text = EXCLUDED.text, importance = EXCLUDED.importance,
                  confidence = EXCLUDED.confidence, status = EXCLUDED.status, updated_at = EXCLUDED.updated_at,
                  superseded_at = EXCLUDED.superseded_at, superseded_by = EXCLUDED.superseded_by,
                  provenance = EXCLUDED.provenance, entities = EXCLUDED.entities,
                  access_count = EXCLUDED.access_count, reinforcement_count = EXCLUDED.reinforcement_count,
                  version = EXCLUDED.version, embedding = COALESCE(EXCLUDED.embedding, memories.embedding)""",
            (
                record.id,
                record.tenant_id,
                record.user_id,
                record.type.value,
                record.text,
                record.content_hash,
                record.category,
                record.key_name,
                record.value,
                record.importance,
                record.confidence,
                record.status.value,
                record.observed_at,
                record.created_at,
                record.updated_at,
                record.superseded_at,
                record.superseded_by,
                Jsonb(record.source.model_dump(mode="json")),
                record.entities,
                record.access_count,
                record.reinforcement_count,
                record.version,
                record.source.session_id,
                embedding,
            ),
        )

    # --- memories: read side ----------------------------------------------

    async def active_profile(
        self, tenant_id: str, user_id: str, query: Sequence[float], min_similarity: float, limit: int
    ) -> list[tuple[MemoryRecord, float]]:
        """Keyed facts and preferences close to the query, with their cosine similarity.

        Exact rows from the source of truth (the index may lag), scored by
        pgvector over one user's profile: a few hundred rows at most.
        """
        async with self.connection("active_profile") as conn:
            cur = await conn.execute(
                f"""SELECT * FROM (
                        SELECT {_RECORD_COLUMNS}, 1 - (embedding <=> %s) AS similarity FROM memories
                        WHERE tenant_id = %s AND user_id = %s AND status = 'active'
                          AND type IN ('fact', 'preference') AND embedding IS NOT NULL
                    ) scored WHERE similarity >= %s ORDER BY similarity DESC LIMIT %s""",
                (np.asarray(query, dtype=np.float32), tenant_id, user_id, min_similarity, limit),
            )
            rows = await cur.fetchall()
            return [(record_from_row(r), r["similarity"]) for r in rows]

    async def active_ids(self, tenant_id: str, user_id: str, ids: Sequence[str]) -> set[str]:
        """Which of these ids Postgres still holds as active (the index may lag behind)."""
        if not ids:
            return set()
        async with self.connection("active_ids") as conn:
            cur = await conn.execute(
                "SELECT id FROM memories WHERE tenant_id = %s AND user_id = %s AND id = ANY(%s) AND status = 'active'",
                (tenant_id, user_id, list(ids)),
            )
            return {r["id"] for r in await cur.fetchall()}

    async def list_memories(
        self,
        tenant_id: str,
        user_id: str,
        *,
        type_: MemoryType | None,
        status: MemoryStatus | None,
        limit: int,
        offset: int,
    ) -> list[MemoryRecord]:
        async with self.connection("list_memories") as conn:
            cur = await conn.execute(
                f"""SELECT {_RECORD_COLUMNS} FROM memories WHERE tenant_id = %s AND user_id = %s
                    AND (%s::text IS NULL OR type = %s) AND (%s::text IS NULL OR status = %s)
                    ORDER BY observed_at, id LIMIT %s OFFSET %s""",
                (tenant_id, user_id, type_, type_, status, status, limit, offset),
            )
            return [record_from_row(r) for r in await cur.fetchall()]

    async def history(self, tenant_id: str, user_id: str, memory_id: str) -> list[MemoryRecord]:
        """The supersession chain through `memory_id`, oldest first."""
        async with self.connection("history") as conn:
            cur = await conn.execute(
                f"""WITH RECURSIVE back AS (
                      SELECT {_RECORD_COLUMNS} FROM memories WHERE tenant_id = %(t)s AND user_id = %(u)s AND id = %(id)s
                      UNION
                      SELECT m.id, m.tenant_id, m.user_id, m.type, m.text, m.content_hash, m.category, m.key_name, m.value,
                        m.importance, m.confidence, m.status, m.observed_at, m.created_at, m.updated_at, m.superseded_at,
                        m.superseded_by, m.provenance, m.entities, m.access_count, m.reinforcement_count, m.version
                      FROM memories m JOIN back b ON m.superseded_by = b.id OR m.id = b.superseded_by
                      WHERE m.tenant_id = %(t)s AND m.user_id = %(u)s
                    ) SELECT * FROM back ORDER BY observed_at, created_at""",
                {"t": tenant_id, "u": user_id, "id": memory_id},
            )
            return [record_from_row(r) for r in await cur.fetchall()]

    async def counts_by_type_status(self) -> list[tuple[str, str, int]]:
        async with self.connection("counts") as conn:
            cur = await conn.execute("SELECT type, status, count(*) AS n FROM memories GROUP BY type, status")
            return [(r["type"], r["status"], int(r["n"])) for r in await cur.fetchall()]
