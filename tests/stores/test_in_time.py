"""Observation time decides what is current, through the consolidator's real transaction path and real Postgres.

Any arrival order of the same timestamped statements of one keyed fact, in any
grouping into batches, leaves the same current value and the same answers to
point-in-time reads (MemoryReader.recall_as_of) as the statements in time order.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agents.consolidator.agent import consolidate
from schemas import EmbeddedCandidate
from services.core.textutil import normalize, stable_id
from services.runtime import Runtime
from services.stores.postgres import migrate
from tests.factories import city_fact
from tests.pg import open_runtime

T0 = datetime(2025, 1, 1, tzinfo=UTC)
DAY = timedelta(days=1)
CITIES = ("Berlin", "Lisbon", "Paris")
Statement = tuple[str, int]  # (city, day it was said)


def said(user: str, city: str, day: int) -> EmbeddedCandidate:
    c = city_fact(
        stable_id("t", user, "fact", "location", "city", normalize(city)),
        city,
        T0 + day * DAY,
        [f"{user}-{city}-{day}"],
        user=user,
    )
    vector = [0.0, 0.0, 0.0]
    vector[CITIES.index(city)] = 1.0
    return EmbeddedCandidate(tenant_id="t", user_id=user, candidate=c, vector=vector, model="test")


async def state(rt: Runtime, user: str, statements: Sequence[Statement]) -> tuple[list[str], dict[float, set[str]]]:
    """The current value(s) of the key, and what a point-in-time read answers around every statement."""
    async with rt.pg.connection("test") as conn:
        cur = await conn.execute(
            """SELECT value, status, observed_at, superseded_at FROM memories
               WHERE tenant_id = 't' AND user_id = %s AND type = 'fact'""",
            (user,),
        )
        rows = await cur.fetchall()
    for row in rows:  # no version ends before it began
        assert row["superseded_at"] is None or row["superseded_at"] >= row["observed_at"], row
    current = sorted(r["value"] for r in rows if r["status"] == "active")
    answers: dict[float, set[str]] = {}
    for day in sorted({-1.0, *(d + shift for _, d in statements for shift in (0.0, 0.5))}):
        found = await rt.reads.recall_as_of(
            "t", user, [1.0, 1.0, 1.0], "lives", T0 + day * DAY, types=["fact"], limit=50
        )
        answers[day] = {m.record.text for m in found}
    return current, answers


async def arrive(rt: Runtime, user: str, batches: Sequence[Sequence[Statement]]) -> None:
    for batch in batches:
        await consolidate(rt, [said(user, city, day) for city, day in batch])


async def compare(data_dir: Path, dsn: str, statements: list[Statement], order: list[int], breaks: list[bool]) -> None:
    async with open_runtime(data_dir, dsn) as rt:
        run = uuid.uuid4().hex[:8]
        in_time = sorted(statements, key=lambda s: s[1])
        await arrive(rt, f"ref-{run}", [[s] for s in in_time])
        batches: list[list[Statement]] = [[]]
        for position, index in enumerate(order):
            if position and breaks[position]:
                batches.append([])
            batches[-1].append(statements[index])
        await arrive(rt, f"any-{run}", batches)
        expected = await state(rt, f"ref-{run}", statements)
        assert expected[0] == [in_time[-1][0]]  # in time order, the last statement is the current value
        assert await state(rt, f"any-{run}", statements) == expected, (in_time, batches)


@st.composite
def arrivals(draw: st.DrawFn) -> tuple[list[Statement], list[int], list[bool]]:
    statements = draw(
        st.lists(
            st.tuples(st.sampled_from(CITIES), st.integers(0, 40)), min_size=1, max_size=6, unique_by=lambda s: s[1]
        )
    )
    order = draw(st.permutations(range(len(statements))))
    breaks = draw(st.lists(st.booleans(), min_size=len(statements), max_size=len(statements)))
    return statements, list(order), breaks


def test_any_arrival_order_gives_the_same_current_fact_and_the_same_past(tmp_path: Path, pg_dsn: str) -> None:
    asyncio.run(migrate(pg_dsn))

    @settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
    @given(arrivals())
    def check(case: tuple[list[Statement], list[int], list[bool]]) -> None:
        asyncio.run(compare(tmp_path, pg_dsn, *case))

    check()


async def test_a_year_old_value_arriving_after_todays_is_history_and_today_stays_current(
    tmp_path: Path, pg_dsn: str
) -> None:
    async with open_runtime(tmp_path, pg_dsn) as rt:
        [today] = await consolidate(rt, [said("u", "Lisbon", 365)])
        backfill = await consolidate(rt, [said("u", "Berlin", 0)])
        async with rt.pg.connection("test") as conn:
            cur = await conn.execute(
                "SELECT value, status, version, superseded_at FROM memories WHERE user_id = 'u' ORDER BY observed_at"
            )
            rows = await cur.fetchall()
        assert [(r["value"], r["status"], r["version"]) for r in rows] == [
            ("Berlin", "superseded", 1),
            ("Lisbon", "active", 1),  # not touched, not re-published
        ]
        assert rows[0]["superseded_at"] == T0 + 365 * DAY
        assert len(backfill) == 1  # one change: the history row
        current, past = await state(rt, "u", [("Lisbon", 365), ("Berlin", 0)])
        assert current == ["Lisbon"]
        assert past[0.5] == {"User lives in Berlin"}
        assert past[365.5] == {"User lives in Lisbon"}
        assert today
