"""`rebuild index` against a real Postgres and both index engines: the rebuilt index holds exactly the active
memories with an embedding, each point as the qdrant sink writes it, and recall over it finds the same."""

from __future__ import annotations

import asyncio
import io
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
from qdrant_client import AsyncQdrantClient

from schemas import ChangeOp, MemoryChange, MemoryRecord, MemoryStatus, MemoryType, Provenance
from services.core.config import Settings
from services.core.textutil import content_hash, stable_id
from services.rebuild.index import build_edge_shard, edge_path, rebuild_edge, rebuild_server
from services.rebuild.progress import Progress
from services.stores.index_feed import plan
from services.stores.postgres import MemoryWriter, PgPool
from services.stores.qdrant_edge_index import EdgeIndex
from services.stores.qdrant_server_index import ServerIndex
from services.stores.vector import Bm25Encoder, IndexedMemory, Scope
from tests.index_probe import search

NOW = datetime(2026, 3, 1, tzinfo=UTC)


def vector(seed: int, dim: int = 384) -> list[float]:
    v = np.random.default_rng(seed).normal(size=dim)
    return [float(x) for x in v / np.linalg.norm(v)]


def memory(user: str, text: str, status: MemoryStatus = MemoryStatus.ACTIVE) -> MemoryRecord:
    return MemoryRecord(
        id=stable_id("t", user, text),
        tenant_id="t",
        user_id=user,
        type=MemoryType.PREFERENCE,
        text=text,
        content_hash=content_hash(text),
        importance=0.5,
        confidence=1.0,
        status=status,
        observed_at=NOW,
        created_at=NOW,
        updated_at=NOW,
        source=Provenance(session_id="s", event_ids=[f"{user}-{text[:5]}"]),
        entities=["tea"] if "tea" in text else [],
    )


ACTIVE = [memory("ann", f"Ann note {i} about tea and trains") for i in range(7)] + [memory("bob", "Bob likes jazz")]


async def seed(pool: PgPool) -> None:
    writer = MemoryWriter()
    async with pool.transaction("seed") as conn:
        for i, record in enumerate(ACTIVE):
            await writer.upsert(conn, record, vector(i))
        await writer.upsert(conn, memory("ann", "retired", MemoryStatus.SUPERSEDED), vector(50))
        await writer.upsert(conn, memory("ann", "no embedding yet"), None)
        await writer.upsert(conn, memory("ann", "another model's vector"), vector(51, dim=8))


def as_sink_writes_it(record: MemoryRecord, dense: list[float]) -> IndexedMemory:
    """The point the qdrant sink makes of a change adding `record`."""
    change = MemoryChange(
        tenant_id="t",
        user_id=record.user_id,
        op=ChangeOp.ADDED,
        record=record,
        vector=dense,
        cause=[],
        committed_at=NOW,
    )
    upserts, _ = plan([change], Bm25Encoder())
    return upserts[0]


def quiet() -> Progress:
    return Progress("index", stream=io.StringIO())


async def test_an_edge_rebuild_replaces_the_shard_with_exactly_the_indexable_memories(
    pool: PgPool, tmp_path: Path
) -> None:
    await seed(pool)
    settings = Settings(data_dir=tmp_path, pg_dsn="postgresql://unused@127.0.0.1:1/x")
    stale = EdgeIndex(edge_path(settings))
    await stale.ensure(384)
    gone = memory("ann", "a point whose memory Postgres no longer has")
    await stale.upsert([as_sink_writes_it(gone, vector(99))])
    await stale.close()

    tally = await rebuild_edge(settings, pool, quiet())

    assert tally.as_dict() == {"memories": len(ACTIVE), "skipped": 2, "caught_up": 0, "removed": 0}
    assert not edge_path(settings).with_name("qdrant.rebuild").exists()
    index = EdgeIndex(edge_path(settings))
    await index.ensure(384)
    try:
        assert await index.count() == len(ACTIVE)
        hits = await search(index, Scope("t", "ann"), vector(3), Bm25Encoder().query("note 3 tea"), 3)
        assert hits[0].id == ACTIVE[3].id
        # The point is the sink's: the same payload the sink builds from the record.
        expected = as_sink_writes_it(ACTIVE[3], vector(3)).payload
        assert {k: hits[0].payload[k] for k in expected} == expected
        assert await index.versions("t", "ann", [gone.id]) == {}
    finally:
        await index.close()


async def test_an_edge_build_reopened_every_few_points_holds_them_all_and_opens_in_memory_for_the_service(
    pool: PgPool, tmp_path: Path
) -> None:
    """The bulk build optimizes and lets go of its pages every `reopen_every` points; nothing written before
    a reopen is lost, and the service's open sets the shard's own placement back to cached (for what it
    writes next; the build left it cold)."""
    import json

    await seed(pool)
    shard = tmp_path / "built"
    reopened: list[int] = []
    optimized: list[int] = []
    original_reopen, original_optimize = EdgeIndex.reopen, EdgeIndex.optimize

    async def reopen(self: EdgeIndex) -> None:
        reopened.append(await self.count())
        await original_reopen(self)

    async def optimize(self: EdgeIndex) -> None:
        optimized.append(await self.count())
        await original_optimize(self)

    EdgeIndex.reopen, EdgeIndex.optimize = reopen, optimize  # type: ignore[method-assign]
    try:
        written = await build_edge_shard(shard, pool, 384, quiet(), Bm25Encoder(), reopen_every=3, page=3)
    finally:
        EdgeIndex.reopen, EdgeIndex.optimize = original_reopen, original_optimize  # type: ignore[method-assign]

    assert written == len(ACTIVE)
    # Pages of 3, 3 and 2 rows: each full stretch optimized, then reopened; the last one optimized too.
    assert reopened == [3, 6]
    assert optimized == [3, 6, 8]

    def placement() -> str:
        return str(json.loads((shard / "edge_config.json").read_text())["vectors"]["dense"]["memory"])

    assert placement() == "cold"
    index = EdgeIndex(shard)
    await index.ensure(384)
    try:
        assert placement() == "cached"
        assert await index.count() == len(ACTIVE)
        hits = await search(index, Scope("t", "ann"), vector(5), Bm25Encoder().query("note 5 tea"), 3)
        assert hits[0].id == ACTIVE[5].id
    finally:
        await index.close()


async def test_a_server_rebuild_moves_the_service_name_to_a_new_collection_by_alias(pool: PgPool) -> None:
    await seed(pool)
    settings = Settings(qdrant_url=":memory:", pg_dsn="postgresql://unused@127.0.0.1:1/x")
    client = AsyncQdrantClient(location=":memory:")
    live = ServerIndex(":memory:", "memories")
    live._client = client  # the service's index, on the one in-memory engine
    await live.ensure(384)
    stale = memory("ann", "stale point")
    await live.upsert([as_sink_writes_it(stale, vector(98))])

    first = await rebuild_server(settings, pool, quiet(), client)

    assert first.memories == len(ACTIVE)
    assert first.skipped == 2
    aliases = {a.alias_name: a.collection_name for a in (await client.get_aliases()).aliases}
    assert aliases["memories"].startswith("memories-r")
    assert await live.count() == len(ACTIVE)  # the service's own name now reaches the rebuilt collection
    assert await live.versions("t", "ann", [stale.id]) == {}

    # A second rebuild switches the alias in one update and drops the collection it named.
    previous = aliases["memories"]
    async with pool.transaction("more") as conn:
        await MemoryWriter().upsert(conn, memory("bob", "Bob now likes opera"), vector(77))
    await asyncio.sleep(1.1)  # a new collection name (second resolution)
    second = await rebuild_server(settings, pool, quiet(), client)
    names = {c.name for c in (await client.get_collections()).collections}
    assert previous not in names
    assert second.memories == len(ACTIVE) + 1
    assert await live.count() == len(ACTIVE) + 1
