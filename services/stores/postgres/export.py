"""One user's data out of Postgres as a `memstream.export/v1` document, and an imported document's rows back in.

Reads run on the caller's connection, in a fixed order, so two exports of
the same state are equal, and page by page through server-side cursors, so
a user with a million memories is never one `fetchall` in memory. Writes run in the commands stage's batch
transaction; they keep every timestamp, version and count the document has,
so exporting what was imported gives the document back.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from datetime import datetime
from typing import Any

import orjson
from psycopg.types.json import Jsonb

from schemas import MemoryRecord, TurnEvent
from schemas.export import ExportDocument, ExportedSession, ExportedSummary, ExportedTurn, ExportPage
from services.stores.postgres.memory_writes import MemoryWriter
from services.stores.postgres.pool import Conn
from services.stores.postgres.records import RECORD_COLUMNS, record_from_row, vector_floats
from services.stores.postgres.windows import turn_digest

# Qualified for the self-join below; the document shows ids as first exported (migration 007).
_COLUMNS = ", ".join(f"m.{column.strip()}" for column in RECORD_COLUMNS.split(","))


# Rows per FETCH from a server-side cursor: what the export holds in memory at a time, whatever the user's size.
PAGE_ROWS = 1000
_USER = "WHERE m.tenant_id = %s AND m.user_id = %s"
_MEMORY_ORDER = "ORDER BY m.observed_at, m.created_at, COALESCE(m.export_id, m.id)"
_MEMORIES = f"""SELECT {_COLUMNS}, COALESCE(m.export_id, m.id) AS doc_id,
                       COALESCE(s.export_id, m.superseded_by) AS doc_superseded_by
                FROM memories m
                LEFT JOIN memories s ON s.id = m.superseded_by AND s.tenant_id = m.tenant_id AND s.user_id = m.user_id
                {_USER} {_MEMORY_ORDER}"""
_VECTORS = f"""SELECT COALESCE(m.export_id, m.id) AS doc_id, m.embedding FROM memories m
               {_USER} AND m.embedding IS NOT NULL {_MEMORY_ORDER}"""
_SESSIONS = """SELECT session_id, window_turns, window_tokens, turn_count, last_turn_at, closed_at, end_event_id,
                      updated_at
               FROM sessions WHERE tenant_id = %s AND user_id = %s ORDER BY session_id"""
_TURNS = """SELECT tenant_id, user_id, event_id, session_id, turn_index, role, content, ts, metadata, archived_at
            FROM turns WHERE tenant_id = %s AND user_id = %s ORDER BY session_id, turn_index, ts, event_id"""
_SUMMARIES = """SELECT session_id, summary, previous_summary, chunk_id, through_turn_index, through_event_id,
                       updated_at
                FROM session_summaries WHERE tenant_id = %s AND user_id = %s ORDER BY session_id"""


async def export_head(
    conn: Conn, tenant_id: str, user_id: str, *, exported_at: datetime, embedding_model: str | None
) -> ExportDocument:
    """The document's fields before its lists (which are empty here): `embedding_model` only if a vector is there."""
    if embedding_model is not None:
        cur = await conn.execute(
            f"SELECT EXISTS (SELECT 1 FROM memories m {_USER} AND m.embedding IS NOT NULL) AS found",
            (tenant_id, user_id),
        )
        row = await cur.fetchone()
        embedding_model = embedding_model if row is not None and row["found"] else None
    return ExportDocument(
        exported_at=exported_at, tenant_id=tenant_id, user_id=user_id, embedding_model=embedding_model
    )


async def _pages(conn: Conn, name: str, query: str, params: tuple[str, str], rows: int) -> AsyncIterator[list[Any]]:
    """`query`'s rows `rows` at a time through a server-side cursor (the caller's transaction holds it open)."""
    async with conn.cursor(name=f"export_{name}") as cur:
        await cur.execute(query, params)
        while page := await cur.fetchmany(rows):
            yield page


async def export_pages(
    conn: Conn, tenant_id: str, user_id: str, *, vectors: bool, page_rows: int = PAGE_ROWS
) -> AsyncIterator[ExportPage]:
    """The user's rows in the document's order, section by section, at most `page_rows` at a time.

    Run it in one REPEATABLE READ transaction (the export route's): each
    section is its own cursor, and one snapshot keeps them consistent.
    """
    params = (tenant_id, user_id)
    async for rows in _pages(conn, "memories", _MEMORIES, params, page_rows):
        records = [record_from_row({**r, "id": r["doc_id"], "superseded_by": r["doc_superseded_by"]}) for r in rows]
        yield ExportPage("memories", records)
    if vectors:
        async for rows in _pages(conn, "vectors", _VECTORS, params, page_rows):
            found = [(r["doc_id"], vector_floats(r["embedding"])) for r in rows]
            yield ExportPage("vectors", [(doc_id, vector) for doc_id, vector in found if vector is not None])
    async for rows in _pages(conn, "sessions", _SESSIONS, params, page_rows):
        yield ExportPage("sessions", [ExportedSession.model_validate(r) for r in rows])
    async for rows in _pages(conn, "turns", _TURNS, params, page_rows):
        turns = [
            ExportedTurn.model_validate({**r, "ts": _iso(r["ts"]), "archived_at": _iso(r["archived_at"])}) for r in rows
        ]
        yield ExportPage("turns", turns)
    async for rows in _pages(conn, "summaries", _SUMMARIES, params, page_rows):
        yield ExportPage("session_summaries", [ExportedSummary.model_validate(r) for r in rows])


def _iso(value: datetime) -> str:
    """Turn times go through the contract's strict RFC 3339 validator, which takes text, not datetimes."""
    return value.isoformat()


async def write_memories(
    writer: MemoryWriter, conn: Conn, rows: Sequence[tuple[MemoryRecord, list[float] | None, str | None]]
) -> None:
    """(record, vector, export id) as they are: no decision, every field kept. Retired rows must come first."""
    for record, vector, export_id in rows:
        await writer.upsert(conn, record, vector)
        if export_id is not None:
            await conn.execute(
                "UPDATE memories SET export_id = %s WHERE tenant_id = %s AND user_id = %s AND id = %s",
                (export_id, record.tenant_id, record.user_id, record.id),
            )


async def write_turns(conn: Conn, turns: Sequence[ExportedTurn]) -> None:
    """Into the archive with their digest recomputed for their (new) tenant and user; a known event stays."""
    if not turns:
        return
    async with conn.cursor() as cur:
        await cur.executemany(
            """INSERT INTO turns (tenant_id, user_id, event_id, session_id, turn_index, role, content, ts, metadata,
                                  content_hash, archived_at)
               VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING""",
            [
                (
                    t.tenant_id,
                    t.user_id,
                    t.event_id,
                    t.session_id,
                    t.turn_index,
                    t.role.value,
                    t.content,
                    t.ts,
                    Jsonb(t.metadata),
                    turn_digest(TurnEvent.model_validate(t.model_dump(exclude={"archived_at"}))),
                    t.archived_at,
                )
                for t in turns
            ],
        )


async def write_sessions(conn: Conn, tenant_id: str, user_id: str, sessions: Sequence[ExportedSession]) -> None:
    if not sessions:
        return
    async with conn.cursor() as cur:
        await cur.executemany(
            """INSERT INTO sessions (tenant_id, user_id, session_id, window_turns, window_tokens, turn_count,
                                     last_turn_at, closed_at, end_event_id, updated_at)
               VALUES (%s, %s, %s, %s::jsonb, %s, %s, %s, %s, %s, %s)
               ON CONFLICT (tenant_id, user_id, session_id) DO NOTHING""",
            [
                (
                    tenant_id,
                    user_id,
                    s.session_id,
                    orjson.dumps([t.model_dump(mode="json") for t in s.window_turns]).decode(),
                    s.window_tokens,
                    s.turn_count,
                    s.last_turn_at,
                    s.closed_at,
                    s.end_event_id,
                    s.updated_at,
                )
                for s in sessions
            ],
        )


async def write_summaries(conn: Conn, tenant_id: str, user_id: str, summaries: Sequence[ExportedSummary]) -> None:
    if not summaries:
        return
    async with conn.cursor() as cur:
        await cur.executemany(
            """INSERT INTO session_summaries (tenant_id, user_id, session_id, summary, previous_summary, chunk_id,
                                              through_turn_index, through_event_id, updated_at)
               VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)
               ON CONFLICT (tenant_id, user_id, session_id) DO NOTHING""",
            [
                (
                    tenant_id,
                    user_id,
                    s.session_id,
                    s.summary,
                    s.previous_summary,
                    s.chunk_id,
                    s.through_turn_index,
                    s.through_event_id,
                    s.updated_at,
                )
                for s in summaries
            ],
        )
