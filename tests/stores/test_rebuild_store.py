"""`rebuild store --from changes` against a real Postgres: the consolidator writes a store and publishes its
changes, sealed per user; replaying those changes into an empty database gives the same memories, row for row,
and a forgotten user's changes, whose key is gone, are skipped and counted."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import orjson
import pytest

from agents.consolidator.apply.candidate import apply_candidate
from agents.consolidator.apply.context import BatchContext
from schemas import EmbeddedCandidate, MemoryCandidate, MemoryChange, MemoryType, Provenance, dumps
from schemas.commands import UserForgotten
from services.archive.changes import seal_changes
from services.archive.codec import MasterKey
from services.archive.keys import KeyStore
from services.core.errors import StackError
from services.core.textutil import stable_id
from services.rebuild.store import StoreTally, apply_stream, require_keys, restore_keys
from services.stores.postgres import MemoryWriter, PgPool, migrate
from services.stores.postgres.commands import Access, CommandStore
from services.stores.postgres.forget import forget_user
from tests.pg import PgServer

T0 = datetime(2026, 3, 1, tzinfo=UTC)
MERGE_SIMILARITY = 0.92
# Every column a record carries, and the embedding: what "the same memories" means here.
COLUMNS = """id, tenant_id, user_id, type, text, content_hash, category, key_name, value, importance, confidence,
status, observed_at, created_at, updated_at, superseded_at, superseded_by, source_session_id, provenance, entities,
access_count, reinforcement_count, version, last_accessed_at, compressed, question, embedding::text AS embedding"""


def direction(*head: float) -> list[float]:
    v = np.zeros(384)
    v[: len(head)] = head
    return [float(x) for x in v / np.linalg.norm(v)]


def candidate(
    user: str, n: int, text: str, vector: list[float], type_: MemoryType = MemoryType.PREFERENCE, **keyed: str
) -> EmbeddedCandidate:
    c = MemoryCandidate(
        tenant_id="t",
        user_id=user,
        candidate_id=stable_id("t", user, "cand", str(n)),
        type=type_,
        text=text,
        importance=0.6,
        confidence=0.9,
        observed_at=T0 + timedelta(minutes=n),
        source=Provenance(session_id=f"s{n // 3}", event_ids=[f"{user}-e{n}"]),
        extractor="test",
        **keyed,  # type: ignore[arg-type]
    )
    return EmbeddedCandidate(tenant_id="t", user_id=user, candidate=c, vector=vector, model="test")


MASTER = MasterKey(bytes(range(32)))
Published = list[tuple[MemoryChange | UserForgotten, bytes]]


async def consolidate(pool: PgPool, batch: list[EmbeddedCandidate], now: datetime) -> Published:
    """The consolidator's batch (agents.consolidator.agent.consolidate) without the runtime around it."""
    writer, changes = MemoryWriter(), []
    async with pool.transaction("consolidate") as conn:
        ctx = await BatchContext.load(writer, conn, batch, MERGE_SIMILARITY, 0.0)
        for position, item in enumerate(batch):
            _, produced = await apply_candidate(writer, conn, item, now, ctx, position)
            changes.extend(produced)
        sealed = await seal_changes(KeyStore(pool, MASTER), conn, changes)
    return [(change, value) for change, (_, value) in zip(changes, sealed, strict=True)]


async def user_keys(pool: PgPool) -> list[dict[str, Any]]:
    async with pool.connection("keys") as conn:
        cur = await conn.execute("SELECT * FROM user_keys ORDER BY tenant_id, user_id")
        return list(await cur.fetchall())


async def live_history(pool: PgPool, backup: list[dict[str, Any]] | None = None) -> Published:
    """A store written by the real consolidator paths, and every change they published (sealed), in order.

    Adds, a reinforcement, a keyed fact superseded, merges won by either side, access marks (unpublished), a redelivered
    candidate (its state published again), and a user forgotten between changes of theirs. `backup` gets the
    user_keys rows as they were just before the forget.
    """
    published: Published = []
    tea, tea_too, green_tea = direction(1, 0.05), direction(1, 0.06), direction(1, 0.3)
    batches = [
        [
            candidate("ann", 0, "Ann prefers tea", tea),
            candidate(
                "ann",
                1,
                "Ann lives in Berlin",
                direction(0, 1),
                MemoryType.FACT,
                category="identity",
                key_name="location",
                value="Berlin",
            ),
            candidate("bob", 2, "Bob likes jazz", direction(0, 0, 1)),
            candidate("gus", 3, "Gus is about to be forgotten", direction(0, 0, 0, 1)),
        ],
        [
            candidate("ann", 4, "Ann prefers tea", tea),  # same text: reinforced
            candidate(
                "ann",
                5,
                "Ann lives in Lisbon",
                direction(0, 1, 0.1),
                MemoryType.FACT,
                category="identity",
                key_name="location",
                value="Lisbon",
            ),
            candidate("ann", 6, "Ann prefers tea, green tea with jasmine in the mornings", tea_too),  # wins a merge
            candidate("bob", 7, "Bob", direction(0, 0, 1, 0.01)),  # loses a merge: less specific
        ],
        [candidate("ann", 0, "Ann prefers tea", tea)],  # redelivered: published again
        [candidate("ann", 8, "Ann drinks green tea after lunch", green_tea)],
    ]
    for n, batch in enumerate(batches):
        published.extend(await consolidate(pool, batch, T0 + timedelta(hours=n)))
    # Access marks, as the consolidator applies a run of them (agents/consolidator/commands.py): in Postgres
    # only, nothing published, so the log cannot bring them back.
    ann = next(r["id"] for r in await rows(pool) if r["user_id"] == "ann" and r["status"] == "active")
    async with pool.transaction("marks") as conn:
        assert await CommandStore().mark_accessed(conn, "t", "ann", [Access(ann, 2, T0 + timedelta(days=1))]) == 1
    if backup is not None:
        backup += await user_keys(pool)
    async with pool.transaction("forget") as conn:
        deleted = await forget_user(conn, "t", "gus")  # gus's data key too: his earlier changes stay sealed
    now = datetime.now(UTC)  # when the forget committed: gus's next key is younger
    gone = UserForgotten(tenant_id="t", user_id="gus", cause=["c"], committed_at=now, deleted_rows=deleted)
    published.append((gone, dumps(gone)))
    published.extend(await consolidate(pool, [candidate("gus", 9, "Gus came back later", direction(0, 1, 1))], T0))
    return published


async def rows(pool: PgPool) -> list[dict[str, Any]]:
    async with pool.connection("rows") as conn:
        cur = await conn.execute(f"SELECT {COLUMNS} FROM memories ORDER BY id")
        return list(await cur.fetchall())


async def as_batches(values: Sequence[bytes | None], size: int) -> AsyncIterator[list[bytes | None]]:
    for start in range(0, len(values), size):
        yield list(values[start : start + size])


@pytest.fixture
async def empty_store(pg_server: PgServer) -> AsyncIterator[PgPool]:
    """A second, empty database: the store that was lost."""
    dsn = pg_server.database()
    await migrate(dsn)
    other = PgPool(dsn, 2)
    await other.open()
    yield other
    await other.close()


ACCESS = ("access_count", "last_accessed_at")


def comparable(found: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows as compared: a retired row's embedding is not on the log when it was written retired (a merge's
    losing candidate), and nothing reads a retired row's embedding, so only active rows compare theirs.
    Access is read traffic, not on the log: a rebuilt row has it as the memory's last change carried it."""
    return [
        {
            **{k: v for k, v in r.items() if k not in ACCESS},
            "embedding": r["embedding"] if r["status"] == "active" else None,
        }
        for r in found
    ]


def accessed(found: list[dict[str, Any]]) -> dict[str, tuple[int, Any]]:
    return {r["id"]: (r["access_count"], r["last_accessed_at"]) for r in found if r["access_count"]}


async def test_replaying_the_changes_into_an_empty_store_gives_the_same_memories(
    pool: PgPool, empty_store: PgPool
) -> None:
    published = await live_history(pool)
    ops = {c.op for c, _ in published}
    assert {"added", "updated", "superseded", "merged", "forgotten"} <= {str(op) for op in ops}
    values = [value for _, value in published]
    assert not any(b"prefers tea" in v or b"lives in" in v for v in values)  # no text in clear on the log

    # The keys where they survived: here the live database's user_keys (a backup restored would do).
    tally = await apply_stream(empty_store, as_batches(values, 3), KeyStore(pool, MASTER))

    live, rebuilt = await rows(pool), await rows(empty_store)
    assert {r["user_id"] for r in live} == {"ann", "bob", "gus"}
    assert len(rebuilt) == len(live) >= 8
    assert comparable(rebuilt) == comparable(live)
    # Marks after a memory's last change are not on the log: the rebuilt store has none of them.
    assert list(accessed(live).values()) == [(2, T0 + timedelta(days=1))]
    assert accessed(rebuilt) == {}
    assert tally.messages == len(values)
    assert tally.forgotten == 1
    assert tally.skipped_forgotten == 1  # gus's change from before he was forgotten: his old key is gone
    assert tally.rejected == 0 == tally.undecodable == tally.unreadable


async def test_a_second_replay_changes_nothing_and_an_older_change_never_takes_a_record_back(
    pool: PgPool, empty_store: PgPool
) -> None:
    values = [value for _, value in await live_history(pool)]
    keys = KeyStore(pool, MASTER)
    await apply_stream(empty_store, as_batches(values, 5), keys)
    first = await rows(empty_store)

    again = await apply_stream(empty_store, as_batches(values, 500), keys)

    assert await rows(empty_store) == first
    assert again.older > 0  # records changed after their first version were not written back in time
    assert again.applied + again.older + again.forgotten + again.skipped_forgotten == len(values)


async def test_a_forgotten_users_changes_are_never_written_and_replaying_the_forget_keeps_their_new_key(
    pool: PgPool, empty_store: PgPool, pg_dsn: str
) -> None:
    published = await live_history(pool)
    values = [value for _, value in published]
    forget_at = next(i for i, (c, _) in enumerate(published) if isinstance(c, UserForgotten))
    # The store and its keys lost together: the keys come from the old database (or a backup), copied in first.
    with pytest.raises(StackError, match="--keys-from"):
        await require_keys(empty_store)
    assert await restore_keys(empty_store, pg_dsn) == 3
    await require_keys(empty_store)
    keys = KeyStore(empty_store, MASTER)

    # Up to just before the forget: nothing of what gus said before he was forgotten is written.
    prefix = await apply_stream(empty_store, as_batches(values[:forget_at], 4), keys)
    assert prefix.skipped_forgotten == 1
    assert not [r for r in await rows(empty_store) if r["user_id"] == "gus"]

    rest = await apply_stream(empty_store, as_batches(values[forget_at:], 4), keys)
    assert (rest.forgotten, rest.applied) == (1, 1)  # the forget, and what gus said after coming back
    assert comparable(await rows(empty_store)) == comparable(await rows(pool))
    assert await user_keys(empty_store) == await user_keys(pool)  # gus's current key survived the replayed forget


async def test_a_key_restored_from_a_backup_older_than_the_forget_is_forgotten_again(
    pool: PgPool, empty_store: PgPool
) -> None:
    backup: list[dict[str, Any]] = []
    values = [value for _, value in await live_history(pool, backup)]
    assert {k["user_id"] for k in backup} == {"ann", "bob", "gus"}  # gus's old key, which the forget deleted
    async with empty_store.transaction("restore") as conn, conn.cursor() as cur:
        columns = list(backup[0])
        await cur.executemany(
            f"INSERT INTO user_keys ({', '.join(columns)}) VALUES ({', '.join(['%s'] * len(columns))})",
            [tuple(row.values()) for row in backup],
        )

    tally = await apply_stream(empty_store, as_batches(values, 4), KeyStore(empty_store, MASTER))

    # The replayed forget deleted the key the live forget had deleted; gus's later change (his new key is not
    # in that backup) stays shut; everyone else is rebuilt.
    assert [k["user_id"] for k in await user_keys(empty_store)] == ["ann", "bob"]
    assert tally.skipped_forgotten == 1
    live = [r for r in await rows(pool) if r["user_id"] != "gus"]
    assert comparable(await rows(empty_store)) == comparable(live)


async def test_messages_that_are_not_changes_are_counted_and_skipped(pool: PgPool, empty_store: PgPool) -> None:
    tally = StoreTally()
    [(_, sealed)] = await consolidate(pool, [candidate("ann", 0, "Ann prefers tea", direction(1))], T0)
    tampered = orjson.dumps({**orjson.loads(sealed), "status": "deleted"})  # a clear field edited
    await apply_stream(empty_store, as_batches([None, b"{}", b"not json", tampered], 2), KeyStore(pool, MASTER), tally)
    assert (tally.messages, tally.undecodable, tally.unreadable, tally.applied) == (4, 3, 1, 0)
    assert await rows(empty_store) == []
