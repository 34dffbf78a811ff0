"""Reads of Postgres that only tests make, built on what the package keeps.

`open_questions` runs the statement recall pipelines (`MemoryReader.recall_reads`)
on its own; `export_user` gathers the export route's pages into one document.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from schemas import MemoryRecord
from schemas.export import ExportDocument
from services.stores.postgres import PgPool
from services.stores.postgres.export import export_head, export_pages
from services.stores.postgres.memory_reads import OPEN_QUESTIONS_SQL
from services.stores.postgres.pool import Conn
from services.stores.postgres.records import record_from_row


async def open_questions(pool: PgPool, tenant_id: str, user_id: str, limit: int) -> list[MemoryRecord]:
    """The user's questions still open, newest first, as recall reads them."""
    async with pool.connection("open_questions") as conn:
        cur = await conn.execute(OPEN_QUESTIONS_SQL, {"t": tenant_id, "u": user_id, "k": limit})
        return [record_from_row(r) for r in await cur.fetchall()]


async def export_user(
    conn: Conn, tenant_id: str, user_id: str, *, exported_at: datetime, embedding_model: str | None
) -> ExportDocument:
    """Everything held on the user as one document in memory; vectors only when `embedding_model` names the
    model that made them. The HTTP route streams the same pages instead."""
    sections: dict[str, list[Any]] = {}
    async with conn.transaction():  # the pages' cursors live in a transaction (a savepoint in the caller's)
        head = await export_head(conn, tenant_id, user_id, exported_at=exported_at, embedding_model=embedding_model)
        async for page in export_pages(conn, tenant_id, user_id, vectors=embedding_model is not None):
            sections.setdefault(page.section, []).extend(page.items)
    return head.model_copy(update={**sections, "vectors": dict(sections.get("vectors", []))})
