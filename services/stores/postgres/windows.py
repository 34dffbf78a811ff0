"""Raw turns (the durable history) and each session's working window."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

import orjson
from psycopg.types.json import Jsonb

from schemas import TurnEvent
from services.stores.postgres.pool import Conn, PgPool

# A session's working window, by tenant, user and session (recall also sends it in its one round trip).
WORKING_WINDOW_SQL = """SELECT session_id, window_turns, window_tokens, last_turn_at, closed_at FROM sessions
    WHERE tenant_id = %(t)s AND user_id = %(u)s AND session_id = %(s)s"""


class Archived(StrEnum):
    NEW = "new"
    DUPLICATE = "duplicate"  # the same event again: a redelivery or a replay
    CONFLICT = "conflict"  # a known event id with different content


@dataclass(frozen=True)
class SessionWindow:
    turns: list[TurnEvent]
    closed: bool
    end_event_id: str | None


def turn_digest(turn: TurnEvent) -> str:
    """What makes two deliveries "the same turn": every field the producer set."""
    return hashlib.sha256(orjson.dumps(turn.model_dump(mode="json"), option=orjson.OPT_SORT_KEYS)).hexdigest()


class WindowStore:
    def __init__(self, pool: PgPool) -> None:
        self._pool = pool

    async def archive_turn(self, conn: Conn, turn: TurnEvent) -> Archived:
        digest = turn_digest(turn)
        cur = await conn.execute(
            """INSERT INTO turns (tenant_id, user_id, event_id, session_id, turn_index, role, content, ts, metadata, content_hash)
               VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING RETURNING 1 AS inserted""",
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
                digest,
            ),
        )
        if await cur.fetchone() is not None:
            return Archived.NEW
        cur = await conn.execute(
            "SELECT content_hash FROM turns WHERE tenant_id = %s AND user_id = %s AND event_id = %s",
            (turn.tenant_id, turn.user_id, turn.event_id),
        )
        row = await cur.fetchone()
        known = row["content_hash"] if row else None
        # Rows archived before digests existed count as the same turn.
        return Archived.DUPLICATE if known in (None, digest) else Archived.CONFLICT

    async def load_window(self, conn: Conn, tenant_id: str, user_id: str, session_id: str) -> SessionWindow:
        """The stored window, locked for this transaction."""
        cur = await conn.execute(
            """SELECT window_turns, closed_at, end_event_id FROM sessions
               WHERE tenant_id = %s AND user_id = %s AND session_id = %s FOR UPDATE""",
            (tenant_id, user_id, session_id),
        )
        row = await cur.fetchone()
        if row is None:
            return SessionWindow([], False, None)
        turns = [TurnEvent.model_validate(t) for t in row["window_turns"]]
        return SessionWindow(turns, row["closed_at"] is not None, row["end_event_id"])

    async def save_window(
        self,
        conn: Conn,
        tenant_id: str,
        user_id: str,
        session_id: str,
        window: Sequence[TurnEvent],
        tokens: int,
        *,
        closed_at: datetime | None = None,
        end_event_id: str | None = None,
    ) -> None:
        """Write the window; a session stays closed only while `closed_at` is given."""
        payload = orjson.dumps([t.model_dump(mode="json") for t in window]).decode()
        last = max((t.ts for t in window), default=None)
        await conn.execute(
            """INSERT INTO sessions (tenant_id, user_id, session_id, window_turns, window_tokens, turn_count,
                                     last_turn_at, closed_at, end_event_id)
               VALUES (%s, %s, %s, %s::jsonb, %s, %s, %s, %s, %s)
               ON CONFLICT (tenant_id, user_id, session_id) DO UPDATE SET
                 window_turns = EXCLUDED.window_turns, window_tokens = EXCLUDED.window_tokens,
                 turn_count = EXCLUDED.turn_count, last_turn_at = COALESCE(EXCLUDED.last_turn_at, sessions.last_turn_at),
                 closed_at = EXCLUDED.closed_at,
                 end_event_id = COALESCE(EXCLUDED.end_event_id, sessions.end_event_id), updated_at = now()""",
            (tenant_id, user_id, session_id, payload, tokens, len(window), last, closed_at, end_event_id),
        )

    async def working_window(self, tenant_id: str, user_id: str, session_id: str) -> dict[str, Any] | None:
        async with self._pool.connection("working_window") as conn:
            cur = await conn.execute(WORKING_WINDOW_SQL, {"t": tenant_id, "u": user_id, "s": session_id})
            return await cur.fetchone()
