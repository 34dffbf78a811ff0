"""A large user's export against a real Postgres: read page by page through server-side cursors, and the
pages, serialized as they come, are the document serialized whole."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta

from schemas import MemoryStatus
from schemas.export import ExportDocument, ExportPage, document_json
from services.stores.postgres import MemoryWriter, PgPool
from services.stores.postgres.export import export_head, export_pages
from tests.store_reads import export_user
from tests.stores.test_forget import NOW, memory, seed

ROWS, PAGE = 3000, 500


async def _seed_many(pool: PgPool) -> None:
    writer = MemoryWriter()
    async with pool.transaction("seed") as conn:
        for n in range(ROWS):
            status = MemoryStatus.ACTIVE if n % 3 else MemoryStatus.SUPERSEDED
            record = memory("t", "big", f"memory number {n}", status).model_copy(
                update={"observed_at": NOW + timedelta(seconds=n)}
            )
            await writer.upsert(conn, record, [float(n), 1.0, 0.5] if n % 5 else None)


async def test_an_export_reads_pages_through_a_server_side_cursor_and_streams_the_whole_document(
    pool: PgPool,
) -> None:
    await _seed_many(pool)
    await seed(pool, "t", "big")  # turns, a session, a summary
    await seed(pool, "t", "neighbour")
    sizes: dict[str, list[int]] = {}
    open_cursors: list[str] = []
    chunks: list[bytes] = []
    async with pool.transaction("export") as conn:
        await conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        head = await export_head(conn, "t", "big", exported_at=NOW, embedding_model="m")

        async def pages() -> AsyncIterator[ExportPage]:
            async for page in export_pages(conn, "t", "big", vectors=True, page_rows=PAGE):
                sizes.setdefault(page.section, []).append(len(page.items))
                if len(sizes[page.section]) == 1 and page.section == "memories":
                    cur = await conn.execute("SELECT name FROM pg_cursors")
                    open_cursors.extend(r["name"] for r in await cur.fetchall())
                yield page

        async for chunk in document_json(head, pages()):
            chunks.append(chunk)
        whole = await export_user(conn, "t", "big", exported_at=NOW, embedding_model="m")

    # The first page came while the rest of the rows were still on the server, behind the cursor.
    assert "export_memories" in open_cursors
    held = ROWS + 2  # and the two of `seed`
    assert sizes["memories"] == [PAGE] * (held // PAGE) + [held % PAGE]
    assert sum(sizes["vectors"]) == len(whole.vectors) == held - ROWS // 5
    assert max(sizes["vectors"]) <= PAGE
    assert len(chunks) >= 2 + len(sizes["memories"]) + len(sizes["vectors"])
    streamed = b"".join(chunks)
    # The previous format: the whole document serialized at once (what the route's response_model produced).
    assert streamed == whole.model_dump_json(by_alias=True).encode()
    doc = ExportDocument.model_validate_json(streamed)
    assert len(doc.memories) == held
    assert {m.user_id for m in doc.memories} == {"big"}
    assert [t.content for t in doc.turns] == ["I love green tea", "and jasmine"]
    assert doc.embedding_model == "m"
