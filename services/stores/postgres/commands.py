"""The consolidator's side of `memory.commands`: idempotency claims and access marks.

Stateless like MemoryWriter: every call runs on the caller's connection, in
the caller's batch transaction, so a claim and the change it guards commit
or roll back together.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from schemas import MemoryRecord
from services.stores.postgres.pool import Conn
from services.stores.postgres.records import RECORD_COLUMNS, record_from_row, vector_floats

# Qualified, because the UPDATE below joins a set of rows that also has an id.
_RETURNED = ", ".join(f"m.{column.strip()}" for column in RECORD_COLUMNS.split(","))


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

    async def mark_accessed(
        self, conn: Conn, tenant_id: str, user_id: str, accesses: Sequence[Access], now: datetime
    ) -> list[tuple[MemoryRecord, list[float] | None]]:
        """Add each access to the user's active rows; the changed records with their vectors.

        Ids not found (another user's, deleted, no longer active) change
        nothing. `last_accessed_at` only moves forward, so marks applied out of
        order still leave the latest access. The vector comes back so the
        published change keeps the memory in the index.
        """
        if not accesses:
            return []
        cur = await conn.execute(
            f"""UPDATE memories m SET access_count = m.access_count + a.hits,
                  last_accessed_at = GREATEST(m.last_accessed_at, a.seen_at),
                  version = m.version + 1, updated_at = %s
                FROM unnest(%s::text[], %s::int[], %s::timestamptz[]) AS a(mid, hits, seen_at)
                WHERE m.tenant_id = %s AND m.user_id = %s AND m.id = a.mid AND m.status = 'active'
                RETURNING {_RETURNED}, m.embedding""",
            (
                now,
                [a.memory_id for a in accesses],
                [a.hits for a in accesses],
                [a.at for a in accesses],
                tenant_id,
                user_id,
            ),
        )
        rows = await cur.fetchall()
        return [(record_from_row(r), vector_floats(r["embedding"])) for r in rows]
