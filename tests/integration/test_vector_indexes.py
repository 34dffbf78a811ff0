"""Both vector index adapters behave alike: the embedded Qdrant Edge shard, and the
qdrant-client adapter against qdrant-client's in-memory mode (same client API)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from services.core.errors import StoreRejected, StoreUnavailable
from services.stores.qdrant_edge_index import EdgeIndex
from services.stores.qdrant_server_index import ServerIndex
from services.stores.vector import Bm25Encoder, IndexedMemory, Scope, VectorIndex
from tests.index_probe import search


def point(pid: str, user: str, text: str, vec: list[float], status: str = "active") -> IndexedMemory:
    payload = {"tenant_id": "t", "user_id": user, "type": "exchange", "status": status, "text": text}
    return IndexedMemory(pid, vec, Bm25Encoder().document(text), payload)


@pytest.fixture(params=["edge", "server"])
async def index(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[VectorIndex]:
    idx: VectorIndex = EdgeIndex(tmp_path / "shard") if request.param == "edge" else ServerIndex(":memory:", "memories")
    await idx.ensure(3)
    await idx.upsert(
        [
            point("00000000-0000-0000-0000-000000000001", "alice", "I love green tea", [1, 0, 0]),
            point("00000000-0000-0000-0000-000000000002", "alice", "my dog is called Rex", [0, 1, 0]),
            point("00000000-0000-0000-0000-000000000003", "bob", "I love green tea too", [1, 0, 0]),
            point(
                "00000000-0000-0000-0000-000000000004",
                "alice",
                "old superseded tea fact",
                [1, 0, 0],
                status="superseded",
            ),
        ]
    )
    yield idx
    await idx.close()


async def test_search_is_scoped_to_tenant_user_and_active(index: VectorIndex) -> None:
    hits = await search(index, Scope("t", "alice"), [1.0, 0.0, 0.0], Bm25Encoder().query("green tea"), 10)
    assert [h.id for h in hits] == ["00000000-0000-0000-0000-000000000001", "00000000-0000-0000-0000-000000000002"]
    assert hits[0].payload["text"] == "I love green tea"
    assert {h.payload["user_id"] for h in hits} == {"alice"}
    assert all(h.payload["status"] == "active" for h in hits)


async def test_upsert_is_idempotent_and_delete_removes(index: VectorIndex) -> None:
    await index.upsert([point("00000000-0000-0000-0000-000000000001", "alice", "I love green tea", [1, 0, 0])])
    assert await index.count() == 4
    await index.delete(["00000000-0000-0000-0000-000000000001"])
    assert await index.count() == 3
    assert await index.ping()


def test_a_scope_needs_tenant_and_user() -> None:
    with pytest.raises(ValueError, match="tenant_id and user_id"):
        Scope("", "alice")


async def test_the_index_rejects_bad_data_as_rejected_not_as_an_outage(index: VectorIndex) -> None:
    with pytest.raises(StoreRejected):
        await index.upsert([point("00000000-0000-0000-0000-000000000009", "alice", "two dims", [1, 0])])


async def test_an_unreachable_qdrant_server_is_an_outage() -> None:
    """A stage retries an outage instead of dead-lettering every valid change (the old behaviour)."""
    idx = ServerIndex("http://127.0.0.1:1", "memories")
    try:
        with pytest.raises(StoreUnavailable):
            await idx.upsert([point("00000000-0000-0000-0000-000000000001", "alice", "tea", [1, 0, 0])])
        with pytest.raises(StoreUnavailable):
            await idx.legs(Scope("t", "alice"), [1.0, 0.0, 0.0], Bm25Encoder().query("tea"), 5)
    finally:
        await idx.close()


async def test_every_edge_shard_call_runs_on_its_one_owner_thread(tmp_path: Path) -> None:
    import threading

    idx = EdgeIndex(tmp_path / "owned")
    await idx.ensure(3)
    seen: set[str] = set()
    loop_thread = threading.current_thread().name
    for _ in range(5):
        seen.add(await idx._on_owner("probe", lambda: threading.current_thread().name))
    await idx.close()
    assert len(seen) == 1
    assert seen != {loop_thread}


async def test_recall_legs_on_the_loop_run_beside_writes_on_the_owner_thread(tmp_path: Path) -> None:
    """Legs run on the caller's loop while upserts run on the owner thread: neither fails, none is lost."""
    idx = EdgeIndex(tmp_path / "shared")
    await idx.ensure(3)
    bm25 = Bm25Encoder()
    n = 400

    async def write() -> None:
        for start in range(0, n, 20):
            ids = (f"00000000-0000-0000-0001-{k:012d}" for k in range(start, start + 20))
            batch = [point(pid, "alice", f"note {pid[-3:]}", [1.0, 0.5, 0.0]) for pid in ids]
            await idx.upsert(batch)

    async def read() -> int:
        reads = 0
        while not writer.done():
            legs = await idx.legs(Scope("t", "alice"), [1.0, 0.5, 0.0], bm25.query("note"), 50)
            assert len(legs.dense) <= 50
            reads += 1
            await asyncio.sleep(0)
        return reads

    writer = asyncio.ensure_future(write())
    reads = await read()
    await writer
    legs = await idx.legs(Scope("t", "alice"), [1.0, 0.5, 0.0], bm25.query("note"), n)
    await idx.close()
    assert reads > 0
    assert len(legs.dense) == len(legs.sparse) == n


async def test_points_with_and_without_context_legs_live_side_by_side(index: VectorIndex) -> None:
    """Only exchanges with turns before them are in the context legs; every point is in its own."""
    bm25 = Bm25Encoder()
    answer = "00000000-0000-0000-0000-000000000005"
    said = IndexedMemory(
        answer,
        [0, 0, 1],
        bm25.document("Yes, on Friday"),
        {"tenant_id": "t", "user_id": "alice", "type": "exchange", "status": "active", "text": "Yes, on Friday"},
        dense_ctx=[0, 1, 0],
        sparse_ctx=bm25.context_document(["Did you go to the concert?"], "Yes, on Friday"),
    )
    await index.upsert([said])
    legs = await index.legs(Scope("t", "alice"), [0.0, 1.0, 0.0], bm25.query("concert"), 10)
    assert [h.id for h in legs.dense_ctx] == [answer]
    assert [h.id for h in legs.sparse_ctx] == [answer]
    assert legs.sparse == []  # "concert" is only in its context
    assert answer in {h.id for h in legs.dense}
    assert len(legs.dense) == 3  # alice's active points, with or without context
    assert await index.context_vectors([answer, "00000000-0000-0000-0000-000000000001"]) == {answer: [0.0, 1.0, 0.0]}
    fused = await search(index, Scope("t", "alice"), [0.0, 1.0, 0.0], bm25.query("concert"), 1)
    assert [h.id for h in fused] == [answer]


async def _fresh(kind: str, tmp_path: Path, name: str) -> VectorIndex:
    idx: VectorIndex = EdgeIndex(tmp_path / name) if kind == "edge" else ServerIndex(":memory:", name)
    await idx.ensure(3)
    return idx


def _exchange(pid: int, user: str, text: str, before: str) -> IndexedMemory:
    bm25 = Bm25Encoder()
    payload = {"tenant_id": "t", "user_id": user, "type": "exchange", "status": "active", "text": text}
    vec = [1.0, float(pid % 3), 0.5]
    return IndexedMemory(
        f"00000000-0000-0000-0000-{pid:012d}",
        vec,
        bm25.document(text),
        payload,
        dense_ctx=vec,
        sparse_ctx=bm25.context_document([before], text),
    )


@pytest.mark.parametrize("kind", ["edge", "server"])
async def test_deleted_and_forgotten_memories_leave_the_bm25_idf_at_once(kind: str, tmp_path: Path) -> None:
    """The engine's IDF counted deleted points until their segment was rewritten: a live index ranked
    differently from one rebuilt from its active memories, and forgotten users' words weighed in."""
    kept = [
        _exchange(1, "alice", "I live in Pune and work as a nurse", "Where do you live?"),
        _exchange(2, "alice", "I prefer green tea over coffee", "What do you drink?"),
        _exchange(3, "alice", "We hiked near the glacier lake", "What did you do?"),
    ]
    gone = [_exchange(10 + i, "alice", f"I lived in Pune in {2000 + i}", "Pune again?") for i in range(6)]
    forgotten = [_exchange(20 + i, "bob", "green tea in Pune, every day", "Tea?") for i in range(6)]
    live = await _fresh(kind, tmp_path, "live")
    rebuilt = await _fresh(kind, tmp_path, "rebuilt")
    try:
        await live.upsert(kept + gone + forgotten)
        await live.upsert(kept[:1])  # a reinforced memory, written again
        await live.delete([p.id for p in gone])
        await live.delete_scope("t", "bob")
        await rebuilt.upsert(kept)

        bm25 = Bm25Encoder()
        for query in ("where does the user live, Pune?", "green tea", "glacier lake hike"):
            was = await live.legs(Scope("t", "alice"), [1.0, 0.0, 0.5], bm25.query(query), 10)
            now = await rebuilt.legs(Scope("t", "alice"), [1.0, 0.0, 0.5], bm25.query(query), 10)
            for leg_was, leg_now in zip(was.all(), now.all(), strict=True):
                assert [h.id for h in leg_was] == [h.id for h in leg_now], query
                assert [h.score for h in leg_was] == pytest.approx([h.score for h in leg_now], rel=1e-6), query
        assert await live.count() == await rebuilt.count() == len(kept)
    finally:
        await live.close()
        await rebuilt.close()
