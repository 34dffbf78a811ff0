"""Point-in-time reads (MemoryReader.recall_as_of) against a real Postgres: which rows were memory at a time."""

from __future__ import annotations

from datetime import datetime, timedelta

from schemas import MemoryRecord, MemoryStatus, MemoryType
from services.core.textutil import stable_id
from services.stores.postgres import MemoryReader, MemoryWriter, PgPool
from tests.stores.test_postgres import NOW, memory

HOUR = timedelta(hours=1)
AHEAD = [1.0, 0.0, 0.0]


def retired(record: MemoryRecord, status: MemoryStatus, at: datetime, by: str | None = None) -> MemoryRecord:
    return record.model_copy(update={"status": status, "superseded_at": at, "superseded_by": by, "updated_at": at})


async def write(pool: PgPool, *rows: tuple[MemoryRecord, list[float] | None]) -> None:
    async with pool.transaction("t") as conn:
        for record, vector in rows:
            await MemoryWriter().upsert(conn, record, vector)


async def texts_at(
    reader: MemoryReader, at: datetime, query: str = "where does the user live", **kw: object
) -> set[str]:
    found = await reader.recall_as_of("t", "u", AHEAD, query, at, limit=50, **kw)  # type: ignore[arg-type]
    return {m.record.text for m in found}


async def test_a_superseded_fact_is_visible_until_it_was_superseded_and_its_successor_only_after(pool: PgPool) -> None:
    berlin = memory("User lives in Berlin", type_=MemoryType.FACT, category="location", key_name="city")
    paris = memory("User lives in Paris", type_=MemoryType.FACT, category="location", key_name="city", at=NOW + HOUR)
    await write(pool, (retired(berlin, MemoryStatus.SUPERSEDED, NOW + HOUR, paris.id), AHEAD), (paris, [0.9, 0.1, 0]))
    reader = MemoryReader(pool)
    assert await texts_at(reader, NOW - HOUR) == set()  # before anything was said
    assert await texts_at(reader, NOW) == {"User lives in Berlin"}  # observed at exactly `at`: visible
    assert await texts_at(reader, NOW + HOUR / 2) == {"User lives in Berlin"}
    assert await texts_at(reader, NOW + HOUR) == {"User lives in Paris"}  # superseded at exactly `at`: gone
    assert await texts_at(reader, NOW + 100 * HOUR) == {"User lives in Paris"}
    # As it was: the row is the superseded one, with its own text and embedding.
    [match] = await reader.recall_as_of("t", "u", AHEAD, "berlin", NOW, limit=5)
    assert match.record.id == berlin.id
    assert match.dense
    assert match.similarity is not None
    assert round(match.similarity, 3) == 1.0
    assert match.text_rank is not None
    assert match.text_rank > 0


async def test_merged_and_pruned_rows_are_visible_before_they_left_deleted_ones_never(pool: PgPool) -> None:
    merged = memory("User enjoys hiking in the mountains", type_=MemoryType.PREFERENCE)
    pruned = memory("User lived near a mountain lake once", type_=MemoryType.EXCHANGE)
    deleted = memory("User lives on a mountain farm", type_=MemoryType.FACT, category="home", key_name="kind")
    await write(
        pool,
        (retired(merged, MemoryStatus.MERGED, NOW + 2 * HOUR, stable_id("winner")), AHEAD),
        # Maintenance marks a prune by `updated_at` only.
        (pruned.model_copy(update={"status": MemoryStatus.PRUNED, "updated_at": NOW + 3 * HOUR}), AHEAD),
        (retired(deleted, MemoryStatus.DELETED, NOW + 4 * HOUR), AHEAD),
    )
    reader = MemoryReader(pool)
    query = "mountain"
    assert await texts_at(reader, NOW + HOUR, query) == {
        "User enjoys hiking in the mountains",
        "User lived near a mountain lake once",
    }
    assert await texts_at(reader, NOW + 2 * HOUR, query) == {"User lived near a mountain lake once"}
    assert await texts_at(reader, NOW + 3 * HOUR, query) == set()


async def test_only_this_users_rows_of_the_asked_types_and_either_leg_finds_them(pool: PgPool) -> None:
    mine_words = memory("Ordered a blue bicycle last spring", type_=MemoryType.EXCHANGE)
    mine_meaning = memory("User prefers cycling to work", type_=MemoryType.PREFERENCE)
    await write(
        pool,
        (mine_words, None),  # no embedding: only the lexical leg can find it
        (mine_meaning, AHEAD),
        (memory("Ordered a blue bicycle last spring", user="v", rid=stable_id("other user")), AHEAD),
        (memory("Ordered a blue bicycle last spring", tenant="x", rid=stable_id("other tenant")), AHEAD),
    )
    reader = MemoryReader(pool)
    found = await reader.recall_as_of("t", "u", AHEAD, "the bicycles she ordered", NOW, limit=10)
    by_text = {m.record.text: m for m in found}
    assert {m.record.id for m in found} == {mine_words.id, mine_meaning.id}
    assert by_text[mine_words.text].similarity is None
    assert not by_text[mine_words.text].dense
    assert by_text[mine_words.text].text_rank is not None  # "bicycles", "ordered" stemmed like the index
    assert by_text[mine_meaning.text].dense
    assert by_text[mine_meaning.text].text_rank is None
    only = await reader.recall_as_of("t", "u", AHEAD, "bicycle", NOW, types=["preference"], limit=10)
    assert [m.record.id for m in only] == [mine_meaning.id]
    # A query of stop words only has no lexical leg; the dense leg still answers.
    assert {m.record.id for m in await reader.recall_as_of("t", "u", AHEAD, "the of a", NOW, limit=10)} == {
        mine_meaning.id
    }
    # Each leg keeps its best `limit`.
    assert len(await reader.recall_as_of("t", "u", AHEAD, "zzz", NOW, limit=1)) == 1
