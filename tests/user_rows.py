"""Rows that name a user, found independently of the code under test: every table with a `user_id` column.

Forgetting a user is checked against this, not against the forget code's
own table list, so a table that code missed shows up here.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg import sql

from schemas import partition_key


def rows_naming(dsn: str, tenant_id: str, user_id: str) -> dict[str, int]:
    """Table → rows naming the user (tenant and user where the table has both, the user alone where not),
    plus the outbox's rows of the user's scope; tables with none are left out."""
    found: dict[str, int] = {}
    with psycopg.connect(dsn) as conn:
        columns: dict[str, set[str]] = {}
        for table, column in conn.execute(
            """SELECT table_name, column_name FROM information_schema.columns
               WHERE table_schema = current_schema() AND column_name IN ('tenant_id', 'user_id')"""
        ).fetchall():
            columns.setdefault(table, set()).add(column)
        for table, has in sorted(columns.items()):
            if "user_id" not in has:
                continue
            where = "tenant_id = %s AND user_id = %s" if "tenant_id" in has else "user_id = %s"
            params: tuple[Any, ...] = (tenant_id, user_id) if "tenant_id" in has else (user_id,)
            query = sql.SQL("SELECT count(*) FROM {} WHERE " + where).format(sql.Identifier(table))
            row = conn.execute(query, params).fetchone()
            if row and row[0]:
                found[table] = int(row[0])
        row = conn.execute(
            "SELECT count(*) FROM outbox WHERE scope = %s", (partition_key(tenant_id, user_id).decode(),)
        ).fetchone()
        if row and row[0]:
            found["outbox"] = int(row[0])
    return found


def settled_rows(
    dsn: str, read: Callable[[], list[dict[str, Any]]], quiet: float = 6.0, within: float = 180.0
) -> list[dict[str, Any]]:
    """What `read()` shows once it did not change for `quiet` seconds and the outbox is empty."""
    deadline, last, since = time.monotonic() + within, None, time.monotonic()
    while time.monotonic() < deadline:
        with psycopg.connect(dsn) as conn:
            pending = conn.execute("SELECT count(*) FROM outbox").fetchone()
        now = read()
        if now != last or (pending and pending[0]):
            last, since = now, time.monotonic()
        elif now and time.monotonic() - since >= quiet:
            return now
        time.sleep(1.0)
    raise TimeoutError("rows did not settle")
