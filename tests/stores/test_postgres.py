"""Every Postgres statement against a real embedded Postgres: windows, outbox, memory writes and reads,
migrations, and the outage / bad-data classification."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

import services.stores.postgres as postgres_package
from schemas import MemoryRecord, MemoryStatus, MemoryType, Provenance, TurnEvent
from services.core.errors import StoreRejected, StoreUnavailable
from services.core.textutil import stable_id
from services.stores.postgres import (
    Archived,
    MemoryReader,
    MemoryWriter,
    Outbox,
    OutboxMessage,
    PgPool,
    WindowStore,
    migrate,
)
from tests.factories import turn_event
from tests.pg import PgServer

NOW = datetime(2026, 3, 1, tzinfo=UTC)
MIGRATIONS = Path(postgres_package.__file__).parent / "migrations"


@pytest.fixture
async def pool(pg_dsn: str) -> AsyncIterator[PgPool]:
    shipped = sorted(int(f.name[:3]) for f in MIGRATIONS.glob("*.sql"))
    assert len(set(shipped)) == len(shipped)  # one file per number (a number may stay unused)
    assert await migrate(pg_dsn) == shipped
    assert await migrate(pg_dsn) == []  # idempotent
    pool = PgPool(pg_dsn, 2)
    await pool.open()
    yield pool
    await pool.close()


def memory(
    text: str,
    *,
    tenant: str = "t",
    user: str = "u",
    rid: str | None = None,
    type_: MemoryType = MemoryType.EXCHANGE,
    status: MemoryStatus = MemoryStatus.ACTIVE,
    at: datetime = NOW,
    **extra: object,
) -> MemoryRecord:
    return MemoryRecord(
        id=rid or stable_id(tenant, user, text),
        tenant_id=tenant,
        user_id=user,
        type=type_,
        text=text,
        content_hash=stable_id("hash", text),
        importance=0.5,
        confidence=1.0,
        status=status,
        observed_at=at,
        created_at=at,
        updated_at=at,
        source=Provenance(session_id="s", event_ids=[f"e-{text[:8]}"]),
        **extra,  # type: ignore[arg-type]
    )


async def test_the_archive_tells_new_duplicate_and_conflicting_turns_apart(pool: PgPool) -> None:
    windows = WindowStore(pool)
    first = turn_event(0, "I live in Berlin.")
    async with pool.transaction("t") as conn:
        assert await windows.archive_turn(conn, first) is Archived.NEW
        assert await windows.archive_turn(conn, first) is Archived.DUPLICATE
        changed = first.model_copy(update={"content": "I live in Paris."})
        assert await windows.archive_turn(conn, changed) is Archived.CONFLICT
        other_user = first.model_copy(update={"user_id": "v"})
        assert await windows.archive_turn(conn, other_user) is Archived.NEW


async def test_a_window_round_trips_and_remembers_who_closed_it(pool: PgPool) -> None:
    windows = WindowStore(pool)
    turns = [turn_event(i, f"turn {i}") for i in range(3)]
    async with pool.transaction("t") as conn:
        empty = await windows.load_window(conn, "t", "u", "s")
        assert (empty.turns, empty.closed, empty.end_event_id) == ([], False, None)
        await windows.save_window(conn, "t", "u", "s", turns, 6)
        loaded = await windows.load_window(conn, "t", "u", "s")
        assert loaded.turns == turns
        assert not loaded.closed
        await windows.save_window(conn, "t", "u", "s", [], 0, closed_at=NOW, end_event_id="end-1")
        closed = await windows.load_window(conn, "t", "u", "s")
        assert (closed.turns, closed.closed, closed.end_event_id) == ([], True, "end-1")
        # A new turn reopens it; who closed it last time is kept.
        await windows.save_window(conn, "t", "u", "s", turns[:1], 2)
        reopened = await windows.load_window(conn, "t", "u", "s")
        assert (reopened.closed, reopened.end_event_id) == (False, "end-1")
    working = await windows.working_window("t", "u", "s")
    assert working is not None
    assert working["window_tokens"] == 2
    assert await windows.working_window("t", "other", "s") is None


async def test_the_outbox_keeps_order_forgets_what_was_sent_and_finds_leftovers(pool: PgPool) -> None:
    outbox = Outbox(pool)
    messages = [OutboxMessage(stable_id("m", str(i)), "t:u", "memory.candidates", b"t:u", b"%d" % i) for i in range(5)]
    async with pool.transaction("t") as conn:
        await outbox.add(conn, messages[:3])
        await outbox.add(conn, messages[3:] + messages[:1])  # the same work twice writes one row
        await outbox.add(conn, [OutboxMessage(stable_id("x"), "t:v", "memory.evicted", b"t:v", b"x")])
        assert [m.value for m in await outbox.pending(conn, "t:u")] == [b"0", b"1", b"2", b"3", b"4"]
    assert await outbox.stale(older_than_seconds=3600, limit=10) == []
    await asyncio.sleep(1.1)
    assert len(await outbox.stale(older_than_seconds=1, limit=10)) == 6
    await outbox.delete([m.id for m in messages])
    async with pool.connection("t") as conn:
        assert await outbox.pending(conn, "t:u") == []
        assert len(await outbox.pending(conn, "t:v")) == 1


async def test_a_write_never_changes_another_tenants_row_even_with_the_same_id(pool: PgPool) -> None:
    writer, reader = MemoryWriter(), MemoryReader(pool)
    shared_id = stable_id("collision")
    mine = memory("tenant one's memory", tenant="x", user="q", rid=shared_id)
    theirs = memory("tenant two's memory", tenant="y", user="q", rid=shared_id)
    async with pool.transaction("t") as conn:
        await writer.upsert(conn, mine, [1.0, 0.0, 0.0])
    with pytest.raises(StoreRejected, match="another tenant or user"):
        async with pool.transaction("t") as conn:
            await writer.upsert(conn, theirs, [0.0, 1.0, 0.0])
    assert [m.text for m in await reader.list_memories("x", "q", type_=None, status=None, limit=10, offset=0)] == [
        "tenant one's memory"
    ]
    assert await reader.list_memories("y", "q", type_=None, status=None, limit=10, offset=0) == []


async def test_writes_and_reads_of_memories_are_scoped_and_complete(pool: PgPool) -> None:
    writer, reader = MemoryWriter(), MemoryReader(pool)
    pune = memory("User lives in Pune", type_=MemoryType.FACT, category="location", key_name="city", value="Pune")
    berlin = memory(
        "User lives in Berlin",
        type_=MemoryType.FACT,
        category="location",
        key_name="city",
        value="Berlin",
        at=NOW + timedelta(days=1),
    )
    tea = memory("User preference: green tea", type_=MemoryType.PREFERENCE)
    async with pool.transaction("t") as conn:
        await writer.upsert(conn, pune, [1.0, 0.0, 0.0])
        await writer.upsert(conn, tea, [0.0, 1.0, 0.0])
        found = await writer.neighbours(
            conn, "t", "u", berlin.id, MemoryType.FACT, berlin.content_hash, ("location", "city")
        )
        assert set(found) == {"fact"}
        assert found["fact"].id == pune.id
        old = pune.model_copy(update={"status": MemoryStatus.SUPERSEDED, "superseded_by": berlin.id, "version": 2})
        await writer.upsert(conn, old, None)
        await writer.upsert(conn, berlin, [0.9, 0.1, 0.0])
        assert [r.id for r in await writer.superseded_by(conn, "t", "u", berlin.id)] == [pune.id]
        again = await writer.neighbours(conn, "t", "u", berlin.id, MemoryType.FACT, berlin.content_hash, None)
        assert set(again) == {"id", "content"}
    assert [r.value for r in await reader.history("t", "u", berlin.id)] == ["Pune", "Berlin"]
    assert await reader.history("t", "other", berlin.id) == []
    profile = await reader.active_profile("t", "u", [1.0, 0.0, 0.0], 0.5, limit=5)
    assert [(r.text, round(sim, 3)) for r, sim in profile] == [("User lives in Berlin", 0.994)]
    facts = await reader.list_memories("t", "u", type_=MemoryType.FACT, status=MemoryStatus.ACTIVE, limit=5, offset=0)
    assert [r.id for r in facts] == [berlin.id]
    assert sorted(await reader.counts_by_type_status()) == [
        ("fact", "active", 1),
        ("fact", "superseded", 1),
        ("preference", "active", 1),
    ]


async def test_standing_preferences_join_the_profile_however_far_from_the_query(pool: PgPool) -> None:
    """An allergy or an instruction holds whatever is asked; a like must be close to the query."""
    writer, reader = MemoryWriter(), MemoryReader(pool)
    user = "standing"
    far, close = [0.0, 0.0, 1.0], [1.0, 0.0, 0.0]

    def pref(text: str, category: str, days: int, who: str = user) -> MemoryRecord:
        return memory(text, user=who, type_=MemoryType.PREFERENCE, category=category, at=NOW + timedelta(days=days))

    instructions = [pref(f"User preference: Always reply in style {i}.", "instruction", i) for i in range(6)]
    allergy = pref("User preference: I'm allergic to peanuts.", "constraint", 10)
    hiking = pref("User preference: I love hiking.", "like", 11)
    theirs = pref("User preference: I'm vegan.", "constraint", 12, who="someone-else")
    city = memory("User lives in Oslo", user=user, type_=MemoryType.FACT, category="location", key_name="city")
    async with pool.transaction("t") as conn:
        for r in [*instructions, allergy, hiking, theirs]:
            await writer.upsert(conn, r, far)
        await writer.upsert(conn, city, close)
    profile = await reader.active_profile("t", user, close, 0.5, limit=3)
    texts = [r.text for r, _ in profile]
    # The close fact first, then the five newest standing preferences; never the far like, never another user's.
    assert texts == ["User lives in Oslo", allergy.text, *[r.text for r in instructions[:1:-1]]]
    reads = await reader.recall_reads("t", user, hit_ids=[], query=close, min_similarity=0.5, profile_limit=3)
    assert [r.text for r, _ in reads.profile] == texts


async def test_bad_data_is_rejected_not_retried(pool: PgPool) -> None:
    windows = WindowStore(pool)
    # Bypass the contract on purpose: these are what the store must classify if one ever slips through.
    nul = TurnEvent.model_construct(**{**turn_event(0, "x").__dict__, "content": "a\x00b"})
    huge = TurnEvent.model_construct(**{**turn_event(1, "y").__dict__, "turn_index": 2**31})
    for bad in (nul, huge):
        with pytest.raises(StoreRejected):
            async with pool.transaction("archive") as conn:
                await windows.archive_turn(conn, bad)


async def test_an_unreachable_database_is_an_outage_reported_within_the_timeouts(pg_dsn: str) -> None:
    closed_port = "postgresql://memstream@127.0.0.1:1/memstream"
    pool = PgPool(closed_port, 1, connect_timeout=1, pool_timeout=1)
    # open() waits for a first connection; a pool that never connects surfaces as unavailable.
    started = time.monotonic()
    with pytest.raises(StoreUnavailable):
        async with pool.connection("ping") as conn:
            await conn.execute("SELECT 1")
    assert time.monotonic() - started < 5
    await pool.close()


async def test_a_paused_then_resumed_database_recovers(pg_server: PgServer, pool: PgPool) -> None:
    """SIGSTOP holds connections open but silent; the pool's wait is bounded, and service resumes."""
    async with pool.connection("hold") as held:
        with pg_server.paused():
            started = time.monotonic()
            with pytest.raises(StoreUnavailable):  # the pool's only other slot cannot connect in time
                async with pool.connection("ping") as conn:
                    await conn.execute("SELECT 1")
            assert time.monotonic() - started < 5
        await held.execute("SELECT 1")
    assert await pool.ping()


async def test_stale_window_rows_from_before_digests_count_as_duplicates(pool: PgPool) -> None:
    windows = WindowStore(pool)
    old = turn_event(5, "archived before migration 2")
    async with pool.transaction("t") as conn:
        await windows.archive_turn(conn, old)
        await conn.execute("UPDATE turns SET content_hash = NULL")
        assert await windows.archive_turn(conn, old.model_copy(update={"content": "other"})) is Archived.DUPLICATE


async def test_a_write_from_an_older_read_never_takes_access_marks_back(pool: PgPool) -> None:
    """Access marks commit on their own; the consolidator may write a row it read before a mark."""
    writer, reader = MemoryWriter(), MemoryReader(pool)
    seen = memory("marked memory").model_copy(update={"access_count": 3, "last_accessed_at": NOW})
    async with pool.transaction("t") as conn:
        await writer.upsert(conn, seen, [1.0, 0.0, 0.0])
        stale = seen.model_copy(update={"access_count": 1, "last_accessed_at": None, "importance": 0.9})
        await writer.upsert(conn, stale, None)
    (row,) = await reader.list_memories("t", "u", type_=None, status=None, limit=5, offset=0)
    assert (row.access_count, row.last_accessed_at, row.importance) == (3, NOW, pytest.approx(0.9))
