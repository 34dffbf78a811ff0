"""A maintenance pass against a real embedded Postgres: rows, versions, outbox, re-runs, idle sessions."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from agents.consolidator.questions import resolve_questions
from agents.maintenance.rules.config import Rules
from agents.maintenance.run import run_pass
from agents.rules.candidates import candidates_for_turn
from schemas import (
    ChangeOp,
    EmbeddedCandidate,
    MemoryChange,
    MemoryRecord,
    MemoryStatus,
    MemoryType,
    Provenance,
)
from schemas.memory import QuestionState
from services.archive.changes import open_changes
from services.archive.codec import MasterKey
from services.archive.keys import KeyStore
from services.core.open_questions import touches
from services.core.textutil import stable_id
from services.stores.postgres import MemoryReader, MemoryWriter, Outbox, OutboxMessage, PgPool, WindowStore
from services.stores.postgres.maintenance import IDLE_SESSIONS, idle_sessions
from tests.factories import turn_event
from tests.store_reads import open_questions
from tests.unit.test_questions import question_record

NOW = datetime(2027, 1, 1, tzinfo=UTC)
RULES = Rules(timedelta(days=180), timedelta(days=7), 0.1, timedelta(days=30), 5, timedelta(days=90))
# What a pass as of NOW leaves of a memory observed 40 days before and written then: 33 days past the grace.
FADE_40_DAYS = 0.5 ** (33 / 180)


def episode(
    i: int,
    user: str = "u",
    importance: float = 0.5,
    type_: MemoryType = MemoryType.EPISODE,
    ingested: datetime | None = None,
) -> MemoryRecord:
    """Observed 40 days before NOW; written then too, unless `ingested` says when (a replay, later)."""
    at = NOW - timedelta(days=40)
    written = ingested or at
    text = f"{type_.value} {i} about marathon training"
    return MemoryRecord(
        id=stable_id("t", user, type_.value, str(i)),
        tenant_id="t",
        user_id=user,
        type=type_,
        text=text,
        content_hash=stable_id("hash", text),
        category="marathon, training",
        importance=importance,
        confidence=0.7,
        status=MemoryStatus.ACTIVE,
        observed_at=at,
        created_at=written,
        updated_at=written,
        source=Provenance(session_id=f"s{i}", event_ids=[f"e{i}"], metadata=[{"dia_id": f"D{i}:1"}]),
    )


def near_axis(i: int) -> list[float]:
    v = np.zeros(384)
    v[0], v[1 + i] = 1.0, 0.3
    return [float(x) for x in v / np.linalg.norm(v)]


MASTER = MasterKey(bytes(range(32)))


def keys_of(pool: PgPool) -> KeyStore:
    """The users' data keys in this database, under the tests' master key: what seals and opens the changes."""
    return KeyStore(pool, MASTER)


class Sent:
    """A publish that keeps what it was handed, opened, and forgets the outbox rows, as the real one does."""

    def __init__(self, outbox: Outbox, keys: KeyStore) -> None:
        self.outbox = outbox
        self.keys = keys
        self.changes: list[MemoryChange] = []

    async def __call__(self, messages: Sequence[OutboxMessage]) -> None:
        opened, skipped = await open_changes(self.keys, [m.value for m in messages])
        assert not skipped, skipped  # every change sealed with its user's current key
        self.changes += [c for c in opened if isinstance(c, MemoryChange)]
        await self.outbox.delete([m.id for m in messages])


async def seed(pool: PgPool, records: Sequence[tuple[MemoryRecord, list[float]]]) -> None:
    writer = MemoryWriter()
    async with pool.transaction("seed") as conn:
        for record, vector in records:
            await writer.upsert(conn, record, vector)


async def test_a_pass_writes_versions_and_changes_and_a_rerun_writes_nothing(pool: PgPool) -> None:
    stale = episode(9, importance=0.105, type_=MemoryType.EXCHANGE)  # 0.092 after the pass
    other_user = episode(0, user="v")
    await seed(
        pool, [*((episode(i), near_axis(i)) for i in range(5)), (stale, near_axis(200)), (other_user, near_axis(0))]
    )
    outbox = Outbox(pool)
    sent = Sent(outbox, keys_of(pool))

    counts = await run_pass(pool, outbox, RULES, NOW, sent, tenant_id="t", user_id="u", keys=keys_of(pool))
    assert counts["patterns"] == 1
    assert counts["compressed"] == 5
    assert counts["pruned"] == 1
    assert counts["users"] == 1
    reads = MemoryReader(pool)
    [pattern] = await reads.list_memories("t", "u", type_=MemoryType.PATTERN, status=None, limit=10, offset=0)
    episodes = await reads.list_memories("t", "u", type_=MemoryType.EPISODE, status=None, limit=10, offset=0)
    assert all(e.compressed and e.version == 2 and e.importance == pytest.approx(0.5 * FADE_40_DAYS) for e in episodes)
    [pruned] = await reads.list_memories("t", "u", type_=None, status=MemoryStatus.PRUNED, limit=10, offset=0)
    assert pruned.id == stale.id
    # The other user was out of scope.
    [untouched] = await reads.list_memories("t", "v", type_=None, status=None, limit=10, offset=0)
    assert untouched.version == 1

    by_id = {c.record.id: c for c in sent.changes}
    assert by_id[pattern.id].op is ChangeOp.ADDED
    assert by_id[pattern.id].vector is not None
    assert len(by_id[pattern.id].vector or []) == 384
    assert by_id[stale.id].op is ChangeOp.DELETED
    assert by_id[stale.id].reason is not None
    assert all(c.key == b"t:u" for c in sent.changes)
    assert await outbox.stale(older_than_seconds=-60, limit=100) == []

    sent.changes.clear()
    again = await run_pass(pool, outbox, RULES, NOW, sent, tenant_id="t", user_id="u", keys=keys_of(pool))
    assert sent.changes == []
    assert set(again) == {"users"}


async def test_a_replayed_history_ages_by_when_it_happened_not_when_it_was_ingested(pool: PgPool) -> None:
    # Observed 40 days before NOW, ingested after it: a pass as of NOW (in the replay's past) still tends it.
    replayed = NOW + timedelta(days=30)
    await seed(pool, [(episode(i, ingested=replayed), near_axis(i)) for i in range(5)])
    outbox = Outbox(pool)
    sent = Sent(outbox, keys_of(pool))
    counts = await run_pass(pool, outbox, RULES, NOW, sent, keys=keys_of(pool))
    assert (counts["decayed"], counts["patterns"], counts["compressed"], counts["semantic"]) == (5, 1, 5, 1)
    reads = MemoryReader(pool)
    episodes = await reads.list_memories("t", "u", type_=MemoryType.EPISODE, status=None, limit=10, offset=0)
    assert all(e.importance == pytest.approx(0.5 * FADE_40_DAYS) and e.updated_at == NOW for e in episodes)
    # The pattern's provenance, as stored, keeps the members' per-turn metadata.
    [pattern] = await reads.list_memories("t", "u", type_=MemoryType.PATTERN, status=None, limit=10, offset=0)
    assert {m["dia_id"] for m in pattern.source.metadata if "dia_id" in m} == {f"D{i}:1" for i in range(5)}
    assert pattern.source.metadata[-1]["memory_ids"] == sorted(e.id for e in episodes)

    sent.changes.clear()
    assert set(await run_pass(pool, outbox, RULES, NOW, sent, keys=keys_of(pool))) == {"users"}
    assert sent.changes == []
    # A pass as of a day after the first decays the (now) unseen memories again, the new pattern too.
    later = await run_pass(pool, outbox, RULES, NOW + timedelta(days=1), sent, keys=keys_of(pool))
    assert (later["decayed"], later["patterns"], later["semantic"]) == (7, 0, 0)


async def test_a_pass_defers_questions_surfaced_often_or_open_long_and_an_answer_still_resolves_them(
    pool: PgPool,
) -> None:
    base = question_record()  # "Which visa do I need for the Japan conference trip?"

    def asked_again(name: str, *, surfaced: int, age: timedelta) -> MemoryRecord:
        return base.model_copy(
            update={
                "id": stable_id("t", "u", "question", name),
                "observed_at": NOW - age,
                "created_at": NOW - age,
                "updated_at": NOW - age,
                "access_count": surfaced,
                "last_accessed_at": NOW - timedelta(days=1) if surfaced else None,
            }
        )

    surfaced = asked_again("surfaced", surfaced=3, age=timedelta(days=5))
    old = asked_again("old", surfaced=1, age=timedelta(days=45))
    fresh = asked_again("fresh", surfaced=2, age=timedelta(days=5))
    await seed(pool, [(surfaced, near_axis(1)), (old, near_axis(2)), (fresh, near_axis(3))])
    reads = MemoryReader(pool)
    assert {q.id for q in await open_questions(pool, "t", "u", limit=10)} == {surfaced.id, old.id, fresh.id}
    outbox = Outbox(pool)
    sent = Sent(outbox, keys_of(pool))

    counts = await run_pass(pool, outbox, RULES, NOW, sent, tenant_id="t", user_id="u", keys=keys_of(pool))
    assert counts["deferred"] == 2
    by_id = {c.record.id: c for c in sent.changes}
    assert set(by_id) == {surfaced.id, old.id}
    assert by_id[surfaced.id].op is ChangeOp.UPDATED
    assert by_id[surfaced.id].reason == "deferred: surfaced 3 times without an answer (limit 3)"
    assert by_id[old.id].reason == "deferred: open for 45 days without an answer (limit 30 days)"
    assert by_id[surfaced.id].vector == pytest.approx(near_axis(1))  # still indexed, like any active memory

    # Deferred is a state: the rows stay active (listed, with history), attempts = surfacings.
    rows = {
        q.id: q for q in await reads.list_memories("t", "u", type_=MemoryType.QUESTION, status=None, limit=10, offset=0)
    }
    assert all(r.status is MemoryStatus.ACTIVE for r in rows.values())
    states = {i: (r.question.state, r.question.attempts, r.version) for i, r in rows.items() if r.question}
    assert states == {
        surfaced.id: (QuestionState.DEFERRED, 3, 2),
        old.id: (QuestionState.DEFERRED, 1, 2),
        fresh.id: (QuestionState.OPEN, 0, 1),
    }
    # Recall's topic touch starts from the open questions only, and would not touch a deferred one anyway.
    assert [q.id for q in await open_questions(pool, "t", "u", limit=10)] == [fresh.id]
    assert not touches(rows[surfaced.id], "what about the Japan conference visa?", [["Japan"]])

    sent.changes.clear()
    again = await run_pass(pool, outbox, RULES, NOW, sent, tenant_id="t", user_id="u", keys=keys_of(pool))
    assert (sent.changes, set(again)) == ([], {"users"})

    # A later statement that answers it still moves a deferred question on.
    said = turn_event(4, "Turns out the Japan conference visa is a short business visa.")
    said = said.model_copy(update={"ts": NOW + timedelta(days=1)})
    exchange = next(c for c in candidates_for_turn(said) if c.type is MemoryType.EXCHANGE)
    batch = [EmbeddedCandidate(tenant_id="t", user_id="u", candidate=exchange, vector=near_axis(9), model="m")]
    async with pool.transaction("t") as conn:
        resolved = await resolve_questions(MemoryWriter(), conn, batch, said.ts)
    assert {c.record.id for c in resolved} == {surfaced.id, old.id, fresh.id}
    assert all(c.record.question and c.record.question.state is QuestionState.TENTATIVELY_RESOLVED for c in resolved)


async def test_changes_stay_in_the_outbox_when_publishing_fails(pool: PgPool) -> None:
    await seed(pool, [(episode(1, importance=0.3), near_axis(1))])
    outbox = Outbox(pool)

    async def broker_down(_: Sequence[OutboxMessage]) -> None:
        raise ConnectionError("broker down")

    with pytest.raises(ConnectionError):
        await run_pass(pool, outbox, RULES, NOW, broker_down, keys=keys_of(pool))
    [left] = await outbox.stale(older_than_seconds=-60, limit=100)
    assert b"marathon" not in left.value  # sealed in the transaction, before it ever reaches the broker
    [change], _ = await open_changes(keys_of(pool), [left.value])
    assert isinstance(change, MemoryChange)
    assert change.record.importance == pytest.approx(0.3 * FADE_40_DAYS)


async def test_idle_sessions_are_open_ones_whose_last_turn_is_old(pool: PgPool) -> None:
    windows = WindowStore(pool)
    turn = turn_event(0, "hello")
    async with pool.transaction("t") as conn:
        await windows.save_window(conn, "t", "u", "open", [turn], 1)
        await windows.save_window(conn, "t", "u", "closed", [turn], 1, closed_at=turn.ts, end_event_id="end")
        await windows.save_window(
            conn, "t", "u", "fresh", [turn.model_copy(update={"ts": turn.ts + timedelta(hours=2)})], 1
        )
    found = await idle_sessions(pool, turn.ts + timedelta(hours=1))
    assert [(s.session_id, s.last_turn_at) for s in found] == [("open", turn.ts)]


async def test_the_idle_check_reads_open_sessions_only_however_many_have_closed(pool: PgPool) -> None:
    """A check every few seconds must not read every session ever held (closed ones stay in the table)."""
    at = datetime(2026, 1, 1, tzinfo=UTC)
    async with pool.transaction("t") as conn:
        await conn.execute(
            """INSERT INTO sessions (tenant_id, user_id, session_id, last_turn_at, closed_at)
               SELECT 'idx', 'u' || (i %% 500), 's' || i, %s - i * interval '1 second', %s
               FROM generate_series(1, 20000) AS i""",
            (at, at),
        )
        await conn.execute(
            """INSERT INTO sessions (tenant_id, user_id, session_id, last_turn_at)
               SELECT 'idx', 'open', 's' || i, %s - i * interval '1 hour' FROM generate_series(1, 3) AS i""",
            (at,),
        )
        await conn.execute("ANALYZE sessions")
        cur = await conn.execute("EXPLAIN (FORMAT JSON) " + IDLE_SESSIONS, (at, 1000))
        plan = str(await cur.fetchone())
    assert "sessions_open_by_last_turn" in plan, plan
    found = await idle_sessions(pool, at)
    assert [s.session_id for s in found if s.tenant_id == "idx"] == ["s3", "s2", "s1"]
