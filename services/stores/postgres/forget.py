"""Forgetting a user: every row that names them, in every table, in the caller's transaction.

The tables are found, not listed: every table of the schema with both a
`tenant_id` and a `user_id` column (memories in every status, raw turns,
sessions and their windows, session summaries, applied commands, and any
table a later migration adds), plus the outbox rows of the user's scope. A
table someone adds later is forgotten too without anyone remembering to.
"""

from __future__ import annotations

from collections.abc import Collection

from psycopg import sql

from schemas import partition_key
from services.stores.postgres.pool import Conn

OUTBOX = "outbox"


async def user_tables(conn: Conn) -> list[str]:
    """Tables of the current schema with both scope columns, in name order."""
    cur = await conn.execute(
        """SELECT c.table_name FROM information_schema.columns c
           JOIN information_schema.tables t ON t.table_schema = c.table_schema AND t.table_name = c.table_name
           WHERE c.table_schema = current_schema() AND t.table_type = 'BASE TABLE'
             AND c.column_name IN ('tenant_id', 'user_id')
           GROUP BY c.table_name HAVING count(DISTINCT c.column_name) = 2
           ORDER BY c.table_name"""
    )
    return [str(r["table_name"]) for r in await cur.fetchall()]


async def forget_user(conn: Conn, tenant_id: str, user_id: str, keep: Collection[str] = ()) -> dict[str, int]:
    """Delete the user's rows everywhere but in `keep`; rows deleted per table (those with none are left out).

    `keep` is for replaying a forget that happened long ago (services/rebuild/store.py keeps the user's
    current data key); forgetting itself keeps nothing.
    """
    deleted: dict[str, int] = {}
    for table in await user_tables(conn):
        if table in keep:
            continue
        cur = await conn.execute(
            sql.SQL("DELETE FROM {} WHERE tenant_id = %s AND user_id = %s").format(sql.Identifier(table)),
            (tenant_id, user_id),
        )
        if cur.rowcount:
            deleted[table] = cur.rowcount
    cur = await conn.execute("DELETE FROM outbox WHERE scope = %s", (partition_key(tenant_id, user_id).decode(),))
    if cur.rowcount:
        deleted[OUTBOX] = cur.rowcount
    return deleted


async def holds_user(conn: Conn, tenant_id: str, user_id: str) -> bool:
    """Whether any table still names the user: what "an unknown user" means to every route."""
    tables = await user_tables(conn)
    checks: list[sql.Composable] = [
        sql.SQL("EXISTS (SELECT 1 FROM {} WHERE tenant_id = %(t)s AND user_id = %(u)s)").format(sql.Identifier(t))
        for t in tables
    ]
    checks.append(sql.SQL("EXISTS (SELECT 1 FROM outbox WHERE scope = %(scope)s)"))
    query = sql.SQL("SELECT {} AS held").format(sql.SQL(" OR ").join(checks))
    cur = await conn.execute(query, {"t": tenant_id, "u": user_id, "scope": partition_key(tenant_id, user_id).decode()})
    row = await cur.fetchone()
    return bool(row and row["held"])
