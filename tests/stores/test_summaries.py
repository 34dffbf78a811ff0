"""The rolling per-session summary in Postgres: the redelivery rule, in Python and enforced by the upsert."""

from __future__ import annotations

from services.stores.postgres import ChunkMark, PgPool, SummaryStore
from services.stores.postgres.summaries import Basis, basis_for
from tests.factories import turn_event

FIRST = ChunkMark("c1", 3, "e3")
SECOND = ChunkMark("c2", 5, "e5")


def test_a_chunk_reaches_its_newest_turn_and_is_named_by_its_events() -> None:
    turns = [turn_event(0, "hi"), turn_event(7, "later"), turn_event(4, "between")]
    mark = ChunkMark.of(turns)
    assert (mark.through_turn_index, mark.through_event_id) == (7, "e7")
    assert mark.chunk_id == ChunkMark.of(list(turns)).chunk_id != ChunkMark.of(turns[:2]).chunk_id


async def test_each_chunk_folds_once(pool: PgPool) -> None:
    store = SummaryStore(pool)
    assert await store.load("t", "u", "s") is None
    assert basis_for(None, FIRST) == Basis("", store=True)
    assert await store.save("t", "u", "s", "S1", FIRST)

    # The chunk folded last comes again: it refolds from the summary before it, and keeps that as previous.
    state = await store.load("t", "u", "s")
    assert state is not None
    assert state.basis(FIRST) == Basis("", store=True)
    assert await store.save("t", "u", "s", "S1 again", FIRST)
    state = await store.load("t", "u", "s")
    assert state is not None
    assert (state.summary, state.previous_summary, state.mark) == ("S1 again", "", FIRST)

    # A new chunk folds into the current summary.
    assert state.basis(SECOND) == Basis("S1 again", store=True)
    assert await store.save("t", "u", "s", "S2", SECOND)

    # An older chunk is read against the current summary and never stored, even if a writer tries.
    state = await store.load("t", "u", "s")
    assert state is not None
    assert state.basis(FIRST) == Basis("S2", store=False)
    assert not await store.save("t", "u", "s", "S2 with c1 twice", FIRST)
    assert not await store.save("t", "u", "s", "same reach, other chunk", ChunkMark("c3", 5, "e5b"))
    state = await store.load("t", "u", "s")
    assert state is not None
    assert (state.summary, state.previous_summary, state.mark) == ("S2", "S1 again", SECOND)


async def test_every_query_is_scoped_to_tenant_and_user(pool: PgPool) -> None:
    store = SummaryStore(pool)
    await store.save("t", "u", "s", "mine", SECOND)
    assert await store.load("t", "other", "s") is None
    assert await store.load("other", "u", "s") is None
    # Another user's session of the same id starts from nothing, and saving it leaves the first one alone.
    assert await store.save("t", "other", "s", "theirs", FIRST)
    mine = await store.load("t", "u", "s")
    assert mine is not None
    assert mine.summary == "mine"
