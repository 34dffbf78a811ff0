"""Context units through the stores: the consolidator keeps an exchange's context and its vector,
a repeat in another context keeps the first, a store rebuild from the changes and an index rebuild from
Postgres bring both back, and an index from before context vectors is refused with what to do."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from agents.consolidator.apply.candidate import apply_candidate
from agents.consolidator.apply.context import BatchContext
from agents.rules.candidates import candidates_for_turn
from schemas import ChangeOp, EmbeddedCandidate, MemoryCandidate, MemoryType
from services.core.config import Settings
from services.core.errors import StackError
from services.rebuild.index import edge_path, rebuild_edge
from services.rebuild.progress import Progress
from services.rebuild.store import StoreTally, apply_changes
from services.stores.index_feed import plan
from services.stores.postgres import MemoryWriter, PgPool
from services.stores.postgres.past_context import context_legs_as_of
from services.stores.qdrant_edge_index import EdgeIndex
from services.stores.qdrant_server_index import ServerIndex
from services.stores.vector import Bm25Encoder, Scope
from tests.factories import turn_event

NOW = datetime(2026, 3, 1, tzinfo=UTC)


def unit(seed: int, dim: int = 384) -> list[float]:
    v = np.random.default_rng(seed).normal(size=dim)
    return [float(x) for x in v / np.linalg.norm(v)]


def exchange(i: int, text: str, before: list[str]) -> MemoryCandidate:
    said = turn_event(i, text)  # even: a user turn
    context = [turn_event(100 + j, t) for j, t in enumerate(before)]
    return next(c for c in candidates_for_turn(said, context) if c.type is MemoryType.EXCHANGE)


def embedded(candidate: MemoryCandidate, seed: int) -> EmbeddedCandidate:
    return EmbeddedCandidate(
        tenant_id="t",
        user_id="u",
        candidate=candidate,
        vector=unit(seed),
        model="m",
        context_vector=unit(seed + 1000) if candidate.context else None,
    )


async def context_row(pool: PgPool, memory_id: str) -> tuple[list[str], list[float] | None]:
    async with pool.connection("t") as conn:
        cur = await conn.execute("SELECT context, context_embedding FROM memories WHERE id = %s", (memory_id,))
        row = await cur.fetchone()
    assert row is not None
    ctx = row["context_embedding"]
    return row["context"], None if ctx is None else [float(x) for x in ctx.to_list()]


async def test_an_exchange_keeps_its_context_and_a_repeat_elsewhere_keeps_the_first(pool: PgPool) -> None:
    writer = MemoryWriter()
    first = embedded(exchange(2, "Yes, on Friday.", ["Did you go to the concert?"]), 1)
    again = embedded(exchange(4, "Yes, on Friday.", ["Is the market open?"]), 1)
    async with pool.transaction("t") as conn:
        ctx = await BatchContext.load(writer, conn, [first], None, 0.0)
        _, (added,) = await apply_candidate(writer, conn, first, NOW, ctx)
    assert added.op is ChangeOp.ADDED
    assert added.record.context == ["Did you go to the concert?"]
    assert added.context_vector == first.context_vector
    context, vector = await context_row(pool, added.record.id)
    assert context == ["Did you go to the concert?"]
    assert vector == pytest.approx(first.context_vector, abs=1e-6)

    async with pool.transaction("t") as conn:
        _, (repeated,) = await apply_candidate(writer, conn, again, NOW + timedelta(days=1))
    # The same words said again are the same memory, reinforced: its context is still the first one, and
    # the change carries no context vector (the index keeps the one it holds).
    assert repeated.op is ChangeOp.UPDATED
    assert repeated.record.id == added.record.id
    assert repeated.record.context == ["Did you go to the concert?"]
    assert repeated.context_vector is None
    assert (await context_row(pool, added.record.id))[1] == pytest.approx(first.context_vector, abs=1e-6)

    # A store rebuilt from the log has both, whatever order of changes it replays.
    async with pool.transaction("t") as conn:
        await conn.execute("DELETE FROM memories")
        await apply_changes(writer, conn, [added, repeated], StoreTally())
    context, vector = await context_row(pool, added.record.id)
    assert context == ["Did you go to the concert?"]
    assert vector == pytest.approx(first.context_vector, abs=1e-6)


async def test_an_index_rebuild_fills_the_context_legs_from_postgres(pool: PgPool, tmp_path: Path) -> None:
    writer = MemoryWriter()
    with_context = embedded(exchange(2, "Yes, on Friday.", ["Hello!", "Did you go to the concert?"]), 1)
    opening = embedded(exchange(0, "Hello there.", []), 2)
    async with pool.transaction("t") as conn:
        for item in (with_context, opening):
            await apply_candidate(writer, conn, item, NOW)
    settings = Settings(data_dir=tmp_path, pg_dsn="postgresql://unused@127.0.0.1:1/x")
    tally = await rebuild_edge(settings, pool, Progress("index", stream=io.StringIO()))
    assert tally.memories == 2
    index = EdgeIndex(edge_path(settings))
    await index.ensure(384)
    try:
        assert with_context.context_vector is not None
        legs = await index.legs(Scope("t", "u"), with_context.context_vector, Bm25Encoder().query("concert"), 10)
        assert [h.id for h in legs.dense_ctx] == [with_context.candidate.candidate_id]  # the opening turn has none
        assert legs.dense_ctx[0].score == pytest.approx(1.0, abs=1e-5)
        assert [h.id for h in legs.sparse_ctx] == [with_context.candidate.candidate_id]
        # The same point the sink makes of the change that added it.
        async with pool.transaction("t") as conn:
            _, changes = await apply_candidate(writer, conn, with_context, NOW)
        (point,), _ = plan(changes, Bm25Encoder())
        assert point.sparse_ctx == Bm25Encoder().context_document(with_context.candidate.context, "Yes, on Friday.")
        assert await index.payloads("t", "u", [point.id]) == {point.id: dict(point.payload)}
    finally:
        await index.close()


async def test_an_index_from_before_context_vectors_is_refused_with_what_to_do(tmp_path: Path) -> None:
    import qdrant_edge as qe
    from qdrant_client import models

    shard = tmp_path / "old"
    shard.mkdir()
    old = qe.EdgeShard.create(
        str(shard),
        qe.EdgeConfig(
            vectors={"dense": qe.EdgeVectorParams(size=3, distance=qe.Distance.Cosine)},
            sparse_vectors={"bm25": qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf)},
        ),
    )
    old.close()
    assert "dense_ctx" not in json.loads((shard / "edge_config.json").read_text())["vectors"]
    with pytest.raises(StackError, match="memstream rebuild index"):
        await EdgeIndex(shard).ensure(3)

    server = ServerIndex(":memory:", "memories")
    await server._client.create_collection(
        "memories", vectors_config={"dense": models.VectorParams(size=3, distance=models.Distance.COSINE)}
    )
    with pytest.raises(StackError, match="memstream rebuild index"):
        await server.ensure(3)
    await server.close()


async def test_a_past_view_has_the_context_legs_of_the_exchanges_visible_then(pool: PgPool) -> None:
    writer = MemoryWriter()
    answer = embedded(exchange(2, "Yes, on Friday.", ["Did you go to the concert?"]), 1)
    later = embedded(exchange(4, "Also on Sunday.", ["Any other concert plans?"]), 2)
    later = later.model_copy(
        update={"candidate": later.candidate.model_copy(update={"observed_at": NOW + timedelta(days=3)})}
    )
    async with pool.transaction("t") as conn:
        for item in (answer, later):
            await apply_candidate(writer, conn, item, NOW)
    assert answer.context_vector is not None
    past = await context_legs_as_of(pool, "t", "u", answer.context_vector, "concert", NOW + timedelta(days=1), limit=10)
    ids = {answer.candidate.candidate_id}
    assert [i for i, _ in past.dense] == [answer.candidate.candidate_id]  # the later turn was not said yet
    assert past.dense[0][1] == pytest.approx(1.0, abs=1e-5)
    assert {i for i, _ in past.lexical} == ids  # "concert" is only in the context
    assert set(past.records) == ids
    assert past.records[answer.candidate.candidate_id].context == ["Did you go to the concert?"]
