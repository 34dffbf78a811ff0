"""bench-locomo reads the replay's episodes from the real store: active episodes of the asked users only."""

from __future__ import annotations

from schemas import MemoryRecord, MemoryStatus, MemoryType, Provenance
from services.stores.postgres import MemoryWriter, PgPool
from tests.bench import locomo
from tests.stores.test_postgres import memory


def episode(text: str, user: str, *dia_ids: str, status: MemoryStatus = MemoryStatus.ACTIVE) -> MemoryRecord:
    source = Provenance(session_id=f"{user}-s3", event_ids=list(dia_ids), metadata=[{"dia_id": d} for d in dia_ids])
    record = memory(text, tenant=locomo.TENANT, user=user, type_=MemoryType.EPISODE, status=status)
    return record.model_copy(update={"source": source})


async def test_stored_episodes_are_the_active_episodes_of_each_user_with_their_turns(pool: PgPool, pg_dsn: str) -> None:
    writer = MemoryWriter()
    kept = episode("Ann adopted a cat.", "u1", "D3:1", "D3:2")
    records = [
        kept,
        episode("An old summary.", "u1", "D3:1", status=MemoryStatus.SUPERSEDED),
        episode("Someone else's.", "u3", "D1:1"),
        memory("Ann: I adopted a cat.", tenant=locomo.TENANT, user="u1"),  # an exchange, not an episode
        memory("Other tenant.", tenant="t", user="u1", type_=MemoryType.EPISODE),
    ]
    async with pool.transaction("seed") as conn:
        for record in records:
            await writer.upsert(conn, record, [1.0, 0.0, 0.0])

    found = await locomo.stored_episodes(pg_dsn, iter(["u1", "u2"]))

    assert set(found) == {"u1", "u2"}
    assert found["u2"] == []
    [only] = found["u1"]
    assert only.text == "Ann adopted a cat."
    assert only.turns() == [(3, 1), (3, 2)]
    assert only.sessions() == {3}
