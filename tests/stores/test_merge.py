"""The consolidator's batch lookups for merge and importance, on a real Postgres with pgvector."""

from datetime import UTC, datetime

import numpy as np
import pytest

from schemas import MemoryRecord, MemoryStatus, MemoryType, Provenance
from services.core.textutil import stable_id
from services.stores.postgres import MemoryWriter, PgPool
from services.stores.postgres.memory_writes import Probe

NOW = datetime(2026, 3, 1, tzinfo=UTC)


def unit(*head: float, dim: int = 384) -> list[float]:
    v = np.zeros(dim)
    v[: len(head)] = head
    return list(v / np.linalg.norm(v))


def memory(text: str, type_: MemoryType = MemoryType.PREFERENCE, **extra: object) -> MemoryRecord:
    return MemoryRecord(
        id=stable_id(text, str(extra.get("user_id", "u"))),
        tenant_id="t",
        user_id="u",
        type=type_,
        text=text,
        content_hash=stable_id("hash", text),
        importance=0.5,
        confidence=1.0,
        status=MemoryStatus.ACTIVE,
        observed_at=NOW,
        created_at=NOW,
        updated_at=NOW,
        source=Provenance(session_id="s", event_ids=[f"e-{text}"]),
    ).model_copy(update=extra)


async def test_one_query_finds_each_candidates_nearest_active_memory_of_its_scope_and_type(pool: PgPool) -> None:
    pg = MemoryWriter()
    hiking, tea = memory("hiking"), memory("tea")
    async with pool.transaction("t") as conn:
        await pg.upsert(conn, hiking, unit(1, 0.1))
        await pg.upsert(conn, tea, unit(0, 1))
        await pg.upsert(conn, memory("gone", status=MemoryStatus.MERGED), unit(1, 0))
        await pg.upsert(conn, memory("other user", user_id="v"), unit(1, 0))
        await pg.upsert(conn, memory("a turn", MemoryType.EXCHANGE), unit(1, 0))
        await pg.upsert(conn, memory("wider model"), unit(1, 0, dim=8))
        found = await pg.nearest_batch(
            conn,
            [
                Probe("t", "u", MemoryType.PREFERENCE, unit(1, 0)),
                Probe("t", "u", MemoryType.PREFERENCE, unit(0, 1)),
                Probe("t", "v", MemoryType.FACT, unit(1, 0)),
                Probe("t", "u", MemoryType.PREFERENCE, unit(1, 0, dim=8)),
            ],
            limit=1,
        )
    assert [n.record.id for n in found[0]] == [hiking.id]
    assert found[0][0].similarity == pytest.approx(1 / np.sqrt(1.01), abs=1e-4)
    assert found[0][0].vector == pytest.approx(unit(1, 0.1), abs=1e-6)
    assert [n.record.id for n in found[1]] == [tea.id]
    assert 2 not in found  # no fact for that user
    assert [n.record.text for n in found[3]] == ["wider model"]  # only rows of the probe's dimension


async def test_the_lookup_can_use_the_hnsw_expression_index(pool: PgPool) -> None:
    async with pool.transaction("t") as conn:
        await conn.execute("SET LOCAL enable_seqscan = off")
        await conn.execute("SET LOCAL enable_bitmapscan = off")
        # The test's own database: without the btree scope indexes only HNSW can order by distance.
        await conn.execute("DROP INDEX memories_scope")
        await conn.execute("DROP INDEX memories_hash")
        cur = await conn.execute(
            """EXPLAIN SELECT id FROM memories m WHERE m.tenant_id = 't' AND m.user_id = 'u'
               AND m.type = 'preference' AND m.status = 'active'
               AND m.type IN ('fact', 'preference', 'semantic', 'pattern') AND vector_dims(m.embedding) = 384
               ORDER BY m.embedding::vector(384) <=> %s::text::vector(384) LIMIT 3""",
            ("[" + ",".join(["0.1"] * 384) + "]",),
        )
        plan = "\n".join(str(next(iter(r.values()))) for r in await cur.fetchall())
    assert "memories_merge_hnsw" in plan


async def test_centroids_sum_active_vectors_per_scope_of_one_dimension(pool: PgPool) -> None:
    pg = MemoryWriter()
    async with pool.transaction("t") as conn:
        await pg.upsert(conn, memory("a", MemoryType.EXCHANGE), unit(1, 0))
        await pg.upsert(conn, memory("b", MemoryType.EXCHANGE), unit(0, 1))
        await pg.upsert(conn, memory("c", MemoryType.EXCHANGE, status=MemoryStatus.MERGED), unit(1, 1))
        await pg.upsert(conn, memory("d", MemoryType.EXCHANGE), unit(1, 0, dim=8))
        found = await pg.centroids(conn, [("t", "u", MemoryType.EXCHANGE), ("t", "u", MemoryType.EPISODE)], dim=384)
    assert list(found) == [("t", "u", MemoryType.EXCHANGE)]
    total, count = found[("t", "u", MemoryType.EXCHANGE)]
    assert count == 2
    assert total[:2] == pytest.approx([1.0, 1.0], abs=1e-6)


async def test_kept_centroids_follow_every_change_and_equal_a_fresh_sum(pool: PgPool) -> None:
    """Inserts, status changes (retired, revived), new embeddings and deletes all move the kept sums."""
    pg = MemoryWriter()
    rng = np.random.default_rng(1)
    records = [memory(f"m{k}", MemoryType.EXCHANGE) for k in range(12)]
    async with pool.transaction("t") as conn:
        for record in records:
            await pg.upsert(conn, record, list(rng.normal(size=384)))
        await pg.upsert(conn, records[0].model_copy(update={"status": MemoryStatus.PRUNED}), None)
        await pg.upsert(conn, records[1].model_copy(update={"status": MemoryStatus.MERGED}), None)
        await pg.upsert(conn, records[1], None)  # active again
        await pg.upsert(conn, records[2], list(rng.normal(size=384)))  # a new embedding
        await conn.execute("DELETE FROM memories WHERE id = %s", (records[3].id,))
        await conn.execute("UPDATE memories SET importance = 0.9 WHERE id = %s", (records[4].id,))
        kept = await pg.centroids(conn, [("t", "u", MemoryType.EXCHANGE)], dim=384)
        cur = await conn.execute(
            "SELECT sum(embedding) AS total, count(*) AS n FROM memories WHERE status = 'active' AND type = 'exchange'"
        )
        fresh = await cur.fetchone()
    assert fresh is not None
    total, count = kept[("t", "u", MemoryType.EXCHANGE)]
    assert count == fresh["n"] == 10
    assert total == pytest.approx(np.asarray(fresh["total"].to_list()), abs=1e-4)


async def test_a_scope_with_nothing_active_has_no_centroid(pool: PgPool) -> None:
    pg = MemoryWriter()
    only = memory("only", MemoryType.EXCHANGE)
    async with pool.transaction("t") as conn:
        await pg.upsert(conn, only, unit(1, 0))
        await pg.upsert(conn, only.model_copy(update={"status": MemoryStatus.DELETED}), None)
        assert await pg.centroids(conn, [("t", "u", MemoryType.EXCHANGE)], dim=384) == {}
