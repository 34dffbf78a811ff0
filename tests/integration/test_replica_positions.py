"""Read replicas' positions in Postgres, and `?wait=true`'s wait for the other replicas, on a real Postgres."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.api.replica import Peers, ReplicaState
from services.core.config import Settings
from services.runtime import Runtime
from services.stores.postgres import PgPool, migrate
from services.stores.postgres import replicas as table

offsets = st.dictionaries(st.integers(0, 7), st.integers(0, 10_000), max_size=8)


@given(offsets, offsets)
def test_reached_means_at_or_past_on_every_partition(peer: dict[int, int], target: dict[int, int]) -> None:
    expected = all(peer.get(p, 0) >= o for p, o in target.items())
    assert table.reached(peer, target) is expected
    assert table.reached({p: o + 1 for p, o in target.items()}, target)


def test_a_replica_waits_for_a_batch_it_has_in_hand() -> None:
    state = ReplicaState("r1", "default", positions={0: 5, 1: 9}, applying={0: 8})
    assert state.target() == {0: 8, 1: 9}
    state.ends = {0: 10, 1: 9}
    assert state.lag == 5


@pytest.fixture
async def pool(pg_dsn: str) -> AsyncIterator[PgPool]:
    await migrate(pg_dsn)  # the pool's connections need pgvector's types
    pg = PgPool(pg_dsn, 2)
    await pg.open()
    yield pg
    await pg.close()


async def test_positions_are_reported_and_listed(pool: PgPool) -> None:
    async with pool.connection("test") as conn:
        await table.ensure_table(conn)
        await table.ensure_table(conn)  # created once, a second start changes nothing
        await table.report(conn, "r1", "default", {0: 3, 1: 4}, 2)
        await table.report(conn, "r1", "default", {0: 5, 1: 4}, 0)
        await table.report(conn, "r1", "v2", {0: 1}, 7)
        rows = await table.listing(conn, "default")
    assert [(r.name, r.positions, r.lag) for r in rows] == [("r1", {0: 5, 1: 4}, 0)]
    assert 0 <= rows[0].age_seconds < 5


async def test_wait_for_peers_ends_when_every_live_peer_is_as_far(pool: PgPool, tmp_path: Path) -> None:
    rt = dataclasses.replace(Runtime.create(Settings(data_dir=tmp_path)), pg=pool)
    peers = Peers(rt, stale_seconds=5.0)
    own = ReplicaState("r1", "default", positions={0: 10, 1: 4})
    async with pool.connection("test") as conn:
        await table.ensure_table(conn)
        await table.report(conn, "r2", "default", {0: 9, 1: 4}, 1)
        # A replica that stopped reporting long ago is not waited for.
        await table.report(conn, "r3", "default", {0: 0}, 0)
        await conn.execute("UPDATE public.read_replicas SET updated_at = now() - interval '1 hour' WHERE name = 'r3'")

    started = time.monotonic()
    assert await peers.wait_reached(own, 0.5) is False
    assert time.monotonic() - started >= 0.5

    async with pool.connection("test") as conn:
        await table.report(conn, "r2", "default", {0: 10, 1: 4}, 0)
    assert await peers.wait_reached(own, 0.5) is True
    exported = {p.name: p.lag for p in await peers.export("default")}
    assert exported == {"r2": 0, "r3": 0}

    # A replica that stops cleanly is no longer listed (nor waited for).
    await peers.leave("r3")
    assert [p.name for p in await peers.listing("default")] == ["r2"]
