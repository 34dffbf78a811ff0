"""The transactional outbox: messages committed with the state they follow.

A stage writes its outgoing messages in the transaction that changes
Postgres, publishes them after the commit and only then deletes them. A crash
between commit and publish leaves the rows behind; the next event of the same
scope (or the relay timer) sends them again. Consumers are idempotent, so a
message sent twice is harmless; a message never sent would be lost work.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from services.stores.postgres.pool import Conn, PgPool


@dataclass(frozen=True)
class OutboxMessage:
    id: str  # deterministic: the same work writes the same row
    scope: str  # tenant:user, the partition key's owner
    topic: str
    key: bytes
    value: bytes


def _message(row: dict[str, Any]) -> OutboxMessage:
    return OutboxMessage(str(row["id"]), str(row["scope"]), str(row["topic"]), bytes(row["key"]), bytes(row["value"]))


class Outbox:
    def __init__(self, pool: PgPool) -> None:
        self._pool = pool

    async def add(self, conn: Conn, messages: Sequence[OutboxMessage]) -> None:
        if not messages:
            return
        async with conn.cursor() as cur:
            await cur.executemany(
                "INSERT INTO outbox (id, scope, topic, key, value) VALUES (%s, %s, %s, %s, %s) ON CONFLICT (id) DO NOTHING",
                [(m.id, m.scope, m.topic, m.key, m.value) for m in messages],
            )

    async def pending(self, conn: Conn, scope: str) -> list[OutboxMessage]:
        """Everything not yet confirmed sent for this scope, oldest first."""
        cur = await conn.execute(
            "SELECT id, scope, topic, key, value FROM outbox WHERE scope = %s ORDER BY seq", (scope,)
        )
        return [_message(r) for r in await cur.fetchall()]

    async def stale(self, older_than_seconds: float, limit: int) -> list[OutboxMessage]:
        """Rows left behind (a crash, a partition that moved), for the relay timer."""
        async with self._pool.connection("outbox_stale") as conn:
            cur = await conn.execute(
                """SELECT id, scope, topic, key, value FROM outbox
                   WHERE created_at < now() - make_interval(secs => %s) ORDER BY seq LIMIT %s""",
                (older_than_seconds, limit),
            )
            return [_message(r) for r in await cur.fetchall()]

    async def delete(self, ids: Sequence[str]) -> None:
        if ids:
            async with self._pool.connection("outbox_delete") as conn:
                await conn.execute("DELETE FROM outbox WHERE id = ANY(%s)", (list(ids),))
