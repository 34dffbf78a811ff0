"""The consolidator's side of `memory.commands`: idempotency claims, outcomes, access marks, selections.

Stateless like MemoryWriter: every call runs on the caller's connection, in
the caller's batch transaction, so a claim and the change it guards commit
or roll back together. The read service uses the same selections (unlocked)
to answer 404 before producing a command, and reads outcomes to wait for one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg.types.json import Jsonb

from schemas import MemoryRecord
from services.stores.postgres.pool import Conn
from services.stores.postgres.records import RECORD_COLUMNS, record_from_row


@dataclass(frozen=True)
class Access:
    """What a batch adds to one memory: how many recalls returned it, and the latest of them."""

    memory_id: str
    hits: int
    at: datetime


class CommandStore:
    """There is deliberately no query by memory id alone: every statement names tenant and user."""

    async def claim(self, conn: Conn, tenant_id: str, user_id: str, command_ids: Sequence[str]) -> set[str]:
        """Record these commands as applied; returns the ones that were not already.

        A command redelivered after its batch committed is in applied_commands
        and is left out, so an access mark counts once however often Kafka
        hands it over.
        """
        if not command_ids:
            return set()
        cur = await conn.execute(
            """INSERT INTO applied_commands (tenant_id, user_id, command_id)
               SELECT %s, %s, unnest(%s::text[])
               ON CONFLICT DO NOTHING RETURNING command_id""",
            (tenant_id, user_id, list(dict.fromkeys(command_ids))),
        )
        return {r["command_id"] for r in await cur.fetchall()}

    async def mark_accessed(self, conn: Conn, tenant_id: str, user_id: str, accesses: Sequence[Access]) -> int:
        """Add each access to the user's active rows; how many rows it moved.

        Ids not found (another user's, deleted, no longer active) change
        nothing. `last_accessed_at` only moves forward, so marks applied out of
        order still leave the latest access. Neither `version` nor
        `updated_at` moves: an access is no change of the memory and goes out
        on no topic, so versions keep counting the changes on `memory.changes`.
        Recall reads access from here; a change published later carries the
        counts as they then are.
        """
        if not accesses:
            return 0
        cur = await conn.execute(
            """UPDATE memories m SET access_count = m.access_count + a.hits,
                  last_accessed_at = GREATEST(m.last_accessed_at, a.seen_at)
                FROM unnest(%s::text[], %s::int[], %s::timestamptz[]) AS a(mid, hits, seen_at)
                WHERE m.tenant_id = %s AND m.user_id = %s AND m.id = a.mid AND m.status = 'active'""",
            (
                [a.memory_id for a in accesses],
                [a.hits for a in accesses],
                [a.at for a in accesses],
                tenant_id,
                user_id,
            ),
        )
        return cur.rowcount

    async def release(self, conn: Conn, tenant_id: str, user_id: str, command_ids: Sequence[str]) -> None:
        """Drop claims of commands that changed nothing (access marks for memories no longer there).

        Keeps a forgotten user forgotten: a late mark must not leave a row naming them.
        """
        if command_ids:
            await conn.execute(
                "DELETE FROM applied_commands WHERE tenant_id = %s AND user_id = %s AND command_id = ANY(%s)",
                (tenant_id, user_id, list(command_ids)),
            )

    async def record_outcome(
        self, conn: Conn, tenant_id: str, user_id: str, command_id: str, outcome: list[dict[str, Any]]
    ) -> None:
        await conn.execute(
            "UPDATE applied_commands SET outcome = %s WHERE tenant_id = %s AND user_id = %s AND command_id = %s",
            (Jsonb(outcome), tenant_id, user_id, command_id),
        )

    async def outcomes(
        self, conn: Conn, tenant_id: str, user_id: str, command_ids: Sequence[str]
    ) -> dict[str, list[dict[str, Any]]]:
        """The outcome of each of these commands that has been applied (absent: not yet)."""
        cur = await conn.execute(
            """SELECT command_id, outcome FROM applied_commands
               WHERE tenant_id = %s AND user_id = %s AND command_id = ANY(%s)""",
            (tenant_id, user_id, list(command_ids)),
        )
        return {r["command_id"]: list(r["outcome"] or []) for r in await cur.fetchall()}

    async def active(
        self, conn: Conn, tenant_id: str, user_id: str, *, session_id: str | None = None, lock: bool = False
    ) -> list[MemoryRecord]:
        """The user's active memories (those derived from `session_id` only, when given).

        `lock` holds them until the transaction ends, so a delete decides on rows no one else changes meanwhile.
        """
        cur = await conn.execute(
            f"""SELECT {RECORD_COLUMNS} FROM memories
                WHERE tenant_id = %s AND user_id = %s AND status = 'active'
                  AND (%s::text IS NULL OR source_session_id = %s)
                ORDER BY observed_at, id {"FOR UPDATE" if lock else ""}""",
            (tenant_id, user_id, session_id, session_id),
        )
        return [record_from_row(r) for r in await cur.fetchall()]
