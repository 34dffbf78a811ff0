"""One writer per user: maintenance and consolidator batches on the same memories, concurrently, on real Postgres.

Each round seeds memories old enough to be pruned, then runs a maintenance pass
(prunes them) and a consolidator batch (restates them) at the same time on two
connections. Whatever the interleaving, a pruned row stays pruned and no two
changes published for one record carry the same version.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from pathlib import Path

from agents.consolidator.agent import consolidate
from agents.maintenance.rules.config import Rules
from agents.maintenance.run import maintain_user
from schemas import EmbeddedCandidate, MemoryCandidate, MemoryChange, MemoryStatus, MemoryType, Provenance
from services.archive.changes import open_changes
from services.core.textutil import stable_id
from services.stores.postgres.locks import lock_users, user_lock_key
from tests.pg import open_runtime

NOW = datetime(2026, 6, 1, tzinfo=UTC)
ROUNDS, NOTES = 20, 12
# Every memory not seen for a day is pruned; no patterns or topics (exchanges only).
RULES = Rules(
    decay_half_life=timedelta(days=180),
    decay_after=timedelta(days=1),
    prune_below=1.01,
    prune_after=timedelta(days=1),
    pattern_min=1000,
    semantic_window=timedelta(days=30),
)


def note(n: int, i: int, event: str, days_ago: int) -> EmbeddedCandidate:
    text = f"round {n} note {i}: the user mentioned item {i}"
    vector = [0.0] * 16
    vector[i % 16] = 1.0
    c = MemoryCandidate(
        candidate_id=stable_id("t", "u", "exchange", event),
        tenant_id="t",
        user_id="u",
        type=MemoryType.EXCHANGE,
        text=text,
        importance=0.3,
        confidence=1.0,
        observed_at=NOW - timedelta(days=days_ago),
        source=Provenance(session_id="s", event_ids=[event]),
        extractor="test",
    )
    return EmbeddedCandidate(tenant_id="t", user_id="u", candidate=c, vector=vector, model="test")


async def test_maintenance_and_the_consolidator_never_resurrect_a_row_or_publish_one_version_twice(
    tmp_path: Path, pg_dsn: str
) -> None:
    async with open_runtime(tmp_path, pg_dsn) as rt:
        for n in range(ROUNDS):
            await consolidate(rt, [note(n, i, f"seed-{n}-{i}", 400) for i in range(NOTES)])
            restated = [note(n, i, f"again-{n}-{i}", 300) for i in range(NOTES)]
            (tended, _), said = await asyncio.gather(
                maintain_user(rt.pg, rt.outbox, rt.keys, "t", "u", NOW, RULES),
                consolidate(rt, restated),
            )
            opened, skipped = await open_changes(rt.keys, [m.value for m in tended] + [value for _, value in said])
            changes = [c for c in opened if isinstance(c, MemoryChange)]
            assert not skipped
            versions: dict[str, list[int]] = defaultdict(list)
            for change in changes:
                versions[change.record.id].append(change.record.version)
            for memory_id, seen in versions.items():
                assert len(seen) == len(set(seen)), f"round {n}: {memory_id} published versions {seen}"
            pruned = {c.record.id for c in changes if c.record.status is MemoryStatus.PRUNED}
            assert pruned, f"round {n}: maintenance pruned nothing"
            async with rt.pg.connection("test") as conn:
                cur = await conn.execute(
                    "SELECT id, status, version FROM memories WHERE id = ANY(%s)", (list(versions),)
                )
                stored = {r["id"]: (r["status"], r["version"]) for r in await cur.fetchall()}
            for memory_id in pruned:
                assert stored[memory_id][0] == MemoryStatus.PRUNED.value, f"round {n}: {memory_id} came back"
            for memory_id, seen in versions.items():
                assert stored[memory_id][1] == max(seen), f"round {n}: {memory_id} stored {stored[memory_id]}"


async def test_a_users_lock_makes_the_second_writer_wait_and_other_users_do_not(tmp_path: Path, pg_dsn: str) -> None:
    async with open_runtime(tmp_path, pg_dsn) as rt:
        assert user_lock_key("t", "u") == user_lock_key("t", "u")
        assert user_lock_key("t", "u") != user_lock_key("t", "v")
        assert user_lock_key("ta", "b") != user_lock_key("t", "ab")
        order: list[str] = []
        held = asyncio.Event()

        async def first() -> None:
            async with rt.pg.transaction("first") as conn:
                await lock_users(conn, [("t", "u"), ("t", "v")])
                held.set()
                await asyncio.sleep(0.3)
                order.append("first done")

        async def second(user: str) -> None:
            await held.wait()
            async with rt.pg.transaction("second") as conn:
                await lock_users(conn, [("t", user)])
                order.append(f"second {user}")

        async def other() -> None:
            await held.wait()
            async with rt.pg.transaction("other") as conn:
                await lock_users(conn, [("t", "w")])
                order.append("other user")

        await asyncio.gather(first(), second("u"), other())
        assert order == ["other user", "first done", "second u"]
