"""Forgetting a user against a real Postgres: no row naming them in any table, everyone else's rows untouched;
and the user data of a `memstream.export/v1` document out of and back into Postgres."""

from __future__ import annotations

from datetime import UTC, datetime

from schemas import MemoryRecord, MemoryStatus, TurnEvent, partition_key
from services.core.textutil import stable_id
from services.stores.postgres import ChunkMark, MemoryWriter, Outbox, OutboxMessage, PgPool, SummaryStore, WindowStore
from services.stores.postgres.commands import CommandStore
from services.stores.postgres.forget import forget_user, holds_user, user_tables
from tests.factories import memory_record
from tests.store_reads import export_user
from tests.user_rows import rows_naming

NOW = datetime(2026, 3, 1, tzinfo=UTC)
USER_TABLES = {"applied_commands", "memories", "memory_centroids", "session_summaries", "sessions", "turns"}


def memory(tenant: str, user: str, text: str, status: MemoryStatus = MemoryStatus.ACTIVE) -> MemoryRecord:
    return memory_record(text, tenant=tenant, user=user, status=status, at=NOW, session="s1", events=(f"{user}-e0",))


def turn(tenant: str, user: str, index: int, content: str) -> TurnEvent:
    return TurnEvent(
        event_id=f"{user}-e{index}",
        tenant_id=tenant,
        user_id=user,
        session_id="s1",
        turn_index=index,
        role="user",
        content=content,
        ts=NOW,
    )


async def seed(pool: PgPool, tenant: str, user: str) -> None:
    """A row in every table that holds user data: memories (current and history), turns, a session window,
    a session summary, an applied command and an outbox message of the user's scope."""
    writer, windows, summaries, outbox = MemoryWriter(), WindowStore(pool), SummaryStore(pool), Outbox(pool)
    turns = [turn(tenant, user, 0, "I love green tea"), turn(tenant, user, 1, "and jasmine")]
    async with pool.transaction("seed") as conn:
        await writer.upsert(conn, memory(tenant, user, "Loves green tea"), [1.0, 0.0, 0.0])
        await writer.upsert(conn, memory(tenant, user, "Loved coffee", MemoryStatus.SUPERSEDED), [0.0, 1.0, 0.0])
        for t in turns:
            await windows.archive_turn(conn, t)
        await windows.save_window(conn, tenant, user, "s1", turns, 8)
        await CommandStore().claim(conn, tenant, user, [stable_id("cmd", tenant, user)])
        scope = partition_key(tenant, user)
        await outbox.add(
            conn, [OutboxMessage(stable_id("out", tenant, user), scope.decode(), "memory.changes", scope, b"{}")]
        )
    await summaries.save(tenant, user, "s1", "talked about tea", ChunkMark.of(turns))


async def test_forgetting_leaves_no_row_naming_the_user_in_any_table_and_touches_no_one_else(
    pool: PgPool, pg_dsn: str
) -> None:
    for tenant, user in (("t", "alice"), ("t", "bob"), ("t2", "alice")):
        await seed(pool, tenant, user)
    assert set(rows_naming(pg_dsn, "t", "alice")) == USER_TABLES | {"outbox"}
    async with pool.connection("tables") as conn:
        # Every table holding user data is found without being listed (api_keys names no user).
        assert set(await user_tables(conn)) >= USER_TABLES
        assert await holds_user(conn, "t", "alice")
    bob_before, other_tenant_before = rows_naming(pg_dsn, "t", "bob"), rows_naming(pg_dsn, "t2", "alice")

    async with pool.transaction("forget") as conn:
        deleted = await forget_user(conn, "t", "alice")
    assert deleted == {
        "applied_commands": 1,
        "memories": 2,
        "outbox": 1,
        "session_summaries": 1,
        "sessions": 1,
        "turns": 2,
    }
    assert rows_naming(pg_dsn, "t", "alice") == {}
    assert rows_naming(pg_dsn, "t", "bob") == bob_before
    assert rows_naming(pg_dsn, "t2", "alice") == other_tenant_before
    async with pool.connection("check") as conn:
        assert not await holds_user(conn, "t", "alice")
        assert await holds_user(conn, "t2", "alice")
        again = await forget_user(conn, "t", "alice")
    assert again == {}


async def test_an_export_holds_every_row_of_the_user_in_a_fixed_order(pool: PgPool) -> None:
    await seed(pool, "t", "alice")
    await seed(pool, "t", "bob")
    async with pool.connection("export") as conn:
        doc = await export_user(conn, "t", "alice", exported_at=NOW, embedding_model=None)
        with_vectors = await export_user(conn, "t", "alice", exported_at=NOW, embedding_model="m")
        again = await export_user(conn, "t", "alice", exported_at=NOW, embedding_model=None)
    assert doc == again
    assert [m.text for m in doc.memories] == sorted(
        ["Loves green tea", "Loved coffee"], key=lambda t: stable_id("t", "alice", t)
    )
    assert {m.user_id for m in doc.memories} == {"alice"}
    assert {m.status for m in doc.memories} == {MemoryStatus.ACTIVE, MemoryStatus.SUPERSEDED}  # history included
    assert [t.content for t in doc.turns] == ["I love green tea", "and jasmine"]
    assert [t.event_id for t in doc.sessions[0].window_turns] == ["alice-e0", "alice-e1"]
    assert [s.summary for s in doc.session_summaries] == ["talked about tea"]
    assert doc.vectors == {}
    assert doc.embedding_model is None
    assert with_vectors.embedding_model == "m"
    assert sorted(with_vectors.vectors.values()) == [[0.0, 1.0, 0.0], [1.0, 0.0, 0.0]]
