"""Generations in a real Postgres: a schema of derived tables beside public's, reached through the search path,
and the registry of which generation serves."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import pytest
from psycopg import AsyncConnection
from psycopg.rows import dict_row

from schemas import MemoryRecord
from services.core.generations import DERIVED_TABLES, SHARED_TABLES, Generation, GenerationError
from services.stores.postgres import MemoryWriter, PgPool, migrate
from services.stores.postgres import generations as registry
from services.stores.postgres.forget import forget_user
from tests.factories import memory_record

NOW = datetime(2026, 3, 1, tzinfo=UTC)


def memory(text: str) -> MemoryRecord:
    return memory_record(text, at=NOW)


@pytest.fixture
async def conn(pool: PgPool, pg_dsn: str) -> AsyncIterator[AsyncConnection[dict[str, Any]]]:
    async with await AsyncConnection.connect(pg_dsn, autocommit=True, row_factory=dict_row) as c:
        yield c


async def tables(conn: AsyncConnection[dict[str, Any]], schema: str) -> set[str]:
    cur = await conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = %s", (schema,))
    return {r["tablename"] for r in await cur.fetchall()}


async def test_every_table_is_either_derived_by_a_generation_or_shared_by_all(
    conn: AsyncConnection[dict[str, Any]],
) -> None:
    """A new table must be put on one side: derived tables are re-created per generation, the rest stay in public."""
    await registry.ensure_registry(conn)
    assert await tables(conn, "public") == set(DERIVED_TABLES) | set(SHARED_TABLES)


async def test_a_generations_pool_writes_its_own_tables_and_reads_the_shared_ones(
    pool: PgPool, pg_dsn: str, conn: AsyncConnection[dict[str, Any]]
) -> None:
    await registry.begin(conn, "v2", source="memory.archive")
    assert await tables(conn, "g_v2") == {*DERIVED_TABLES, "schema_migrations"}
    gen_dsn = Generation("v2").dsn(pg_dsn)
    assert await migrate(gen_dsn) == []  # nothing to apply: the shared tables are not made again in g_v2
    assert await tables(conn, "g_v2") == {*DERIVED_TABLES, "schema_migrations"}

    ours = PgPool(gen_dsn, 1)
    await ours.open()
    try:
        async with ours.transaction("write") as c:
            await MemoryWriter().upsert(c, memory("prefers tea in v2"), [1.0, 0.0])
            cur = await c.execute("SELECT count(*) AS n FROM api_keys")  # public's, through the search path
            assert (await cur.fetchone() or {}).get("n") == 0
            assert await forget_user(c, "t", "nobody") == {}  # finds the generation's own user tables
    finally:
        await ours.close()
    async with pool.connection("read") as c:
        cur = await c.execute("SELECT count(*) AS n FROM memories")
        assert (await cur.fetchone() or {}).get("n") == 0  # the default generation saw nothing
    cur = await conn.execute("SELECT text FROM g_v2.memories")
    assert [r["text"] for r in await cur.fetchall()] == ["prefers tea in v2"]
    # The kept centroids (a trigger) are the generation's own too.
    cur = await conn.execute("SELECT n FROM g_v2.memory_centroids")
    assert [r["n"] for r in await cur.fetchall()] == [1]
    assert not await (await conn.execute("SELECT 1 FROM public.memory_centroids")).fetchall()
    # The copied indexes came along: the partial unique index on active keyed facts, the HNSW index.
    cur = await conn.execute("SELECT indexname FROM pg_indexes WHERE schemaname = 'g_v2' AND tablename = 'memories'")
    assert len(await cur.fetchall()) == 5 + 1  # primary key + the migrations' five


async def test_the_registry_says_which_generation_serves_and_switching_is_one_step(
    conn: AsyncConnection[dict[str, Any]],
) -> None:
    assert await registry.serving(conn) == "default"  # before any registry exists
    await registry.begin(conn, "v2", source="memory.archive")
    with pytest.raises(GenerationError, match="building"):
        await registry.switch(conn, "v2")
    await registry.set_state(conn, "v2", "ready", {"events": 10})
    assert await registry.switch(conn, "v2") == "default"
    assert await registry.serving(conn) == "v2"
    states = {r.name: r.state for r in await registry.listing(conn)}
    assert states == {"default": "ready", "v2": "serving"}
    with pytest.raises(GenerationError, match="serves"):
        await registry.drop(conn, "v2")
    with pytest.raises(GenerationError, match="exists"):
        await registry.begin(conn, "v2", source="memory.archive")

    assert await registry.switch(conn, "default") == "v2"
    await registry.drop(conn, "v2")
    assert [r.name for r in await registry.listing(conn)] == ["default"]
    assert await tables(conn, "g_v2") == set()
    with pytest.raises(GenerationError, match="no generation"):
        await registry.switch(conn, "v2")
