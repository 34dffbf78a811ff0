"""`rebuild store --from changes` against a real Postgres: the consolidator writes a store and publishes its
changes; replaying those changes into an empty database gives the same memories, row for row."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest

from agents.consolidator.apply import BatchContext, apply_candidate
from schemas import ChangeOp, EmbeddedCandidate, MemoryCandidate, MemoryChange, MemoryType, Provenance, dumps
from schemas.commands import ACCESS_REASON, UserForgotten
from services.rebuild.store import StoreTally, apply_stream
from services.stores.postgres import MemoryWriter, PgPool, migrate
from services.stores.postgres.commands import Access, CommandStore
from services.stores.postgres.forget import forget_user
from services.textutil import stable_id
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


async def consolidate(pool: PgPool, batch: list[EmbeddedCandidate], now: datetime) -> list[MemoryChange]:
    """The consolidator's batch (agents.consolidator.agent.consolidate) without the runtime around it."""
    writer, changes = MemoryWriter(), []
    async with pool.transaction("consolidate") as conn:
        ctx = await BatchContext.load(writer, conn, batch, MERGE_SIMILARITY, 0.0)
        for position, item in enumerate(batch):
            _, produced = await apply_candidate(writer, conn, item, now, ctx, position)
            changes.extend(produced)
    return changes


async def live_history(pool: PgPool) -> list[MemoryChange | UserForgotten]:
    """A store written by the real consolidator paths, and every change they published, in order.

    Adds, a reinforcement, a keyed fact superseded, merges won by either side, access marks, a redelivered
    candidate (its state published again), and a user forgotten between changes of theirs.
    """
    published: list[MemoryChange | UserForgotten] = []
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
    # Access marks, as the consolidator applies a run of them (agents/consolidator/commands.py).
    store = CommandStore()
    async with pool.transaction("marks") as conn:
        ann = [c.record for c in published if isinstance(c, MemoryChange) and c.user_id == "ann"]
        marked = await store.mark_accessed(conn, "t", "ann", [Access(ann[0].id, 2, T0 + timedelta(days=1))], T0)
    published.extend(
        MemoryChange(
            tenant_id="t",
            user_id="ann",
            op=ChangeOp.UPDATED,
            record=record,
            vector=vector,
            cause=["mark"],
            committed_at=T0,
            reason=ACCESS_REASON,
        )
        for record, vector in marked
    )
    async with pool.transaction("forget") as conn:
        deleted = await forget_user(conn, "t", "gus")
    published.append(UserForgotten(tenant_id="t", user_id="gus", cause=["c"], committed_at=T0, deleted_rows=deleted))
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


def comparable(found: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows as compared: a retired row's embedding is not on the log when it was written retired (a merge's
    losing candidate), and nothing reads a retired row's embedding, so only active rows compare theirs."""
    return [{**r, "embedding": r["embedding"] if r["status"] == "active" else None} for r in found]


async def test_replaying_the_changes_into_an_empty_store_gives_the_same_memories(
    pool: PgPool, empty_store: PgPool
) -> None:
    published = await live_history(pool)
    ops = {c.op for c in published}
    assert {"added", "updated", "superseded", "merged", "forgotten"} <= {str(op) for op in ops}
    values = [dumps(c) for c in published]

    tally = await apply_stream(empty_store, as_batches(values, 3))

    live, rebuilt = await rows(pool), await rows(empty_store)
    assert {r["user_id"] for r in live} == {"ann", "bob", "gus"}
    assert len(rebuilt) == len(live) >= 8
    assert comparable(rebuilt) == comparable(live)
    assert tally.messages == len(values)
    assert tally.forgotten == 1
    assert tally.rejected == 0 == tally.undecodable


async def test_a_second_replay_changes_nothing_and_an_older_change_never_takes_a_record_back(
    pool: PgPool, empty_store: PgPool
) -> None:
    values = [dumps(c) for c in await live_history(pool)]
    await apply_stream(empty_store, as_batches(values, 5))
    first = await rows(empty_store)

    again = await apply_stream(empty_store, as_batches(values, 500))

    assert await rows(empty_store) == first
    assert again.older > 0  # records changed after their first version were not written back in time
    assert again.applied + again.older + again.forgotten == len(values)


async def test_messages_that_are_not_changes_are_counted_and_skipped(empty_store: PgPool) -> None:
    tally = StoreTally()
    await apply_stream(empty_store, as_batches([None, b"{}", b"not json"], 2), tally)
    assert (tally.messages, tally.undecodable, tally.applied) == (3, 3, 0)
    assert await rows(empty_store) == []
