"""The commands agent through Faust's test context, over a real Postgres: access marks applied once each.

Access lives in Postgres only: a mark moves `access_count` and
`last_accessed_at` and publishes nothing, so reads never grow `memory.changes`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest
from pydantic import ValidationError

from agents.consolidator import commands
from schemas import MemoryRecord, MemoryStatus, MemoryType, Provenance
from schemas.commands import AccessCommand
from services.core.textutil import stable_id
from services.stores.postgres import record_from_row
from services.stores.postgres.commands import Access
from services.stores.postgres.records import RECORD_COLUMNS
from tests.agents.test_agents import Harness
from tests.agents.test_agents import harness as harness  # the fixture

NOW = datetime(2026, 5, 1, tzinfo=UTC)
VECTOR = [0.25, 0.5, 0.75, 1.0]


def record(memory_id: str, user: str = "u", status: MemoryStatus = MemoryStatus.ACTIVE) -> MemoryRecord:
    return MemoryRecord(
        id=memory_id,
        tenant_id="t",
        user_id=user,
        type=MemoryType.EXCHANGE,
        text=f"memory {memory_id}",
        content_hash=stable_id("hash", memory_id),
        importance=0.3,
        confidence=1.0,
        status=status,
        observed_at=NOW,
        created_at=NOW,
        updated_at=NOW,
        source=Provenance(session_id="s", event_ids=["e"]),
    )


def command(
    n: int,
    ids: list[str],
    at: datetime,
    user: str = "u",
    counts: list[int] | None = None,
    last: list[datetime] | None = None,
) -> bytes:
    cmd = AccessCommand(
        command_id=stable_id("cmd", str(n)),
        tenant_id="t",
        user_id=user,
        memory_ids=ids,
        at=at,
        counts=counts,
        last_accessed=last,
    )
    return orjson.dumps(cmd.model_dump(mode="json", exclude_none=True))


async def stored(h: Harness) -> dict[str, MemoryRecord]:
    async with h.runtime.pg.connection("test") as conn:
        cur = await conn.execute(f"SELECT {RECORD_COLUMNS} FROM memories")
        return {r.id: r for r in map(record_from_row, await cur.fetchall())}


def accessed(h: Harness, memory_id: str, count: int) -> Callable[[], Awaitable[bool]]:
    async def done() -> bool:
        row = (await stored(h)).get(memory_id)
        return row is not None and row.access_count >= count

    return done


async def test_access_marks_count_once_per_command_for_the_users_own_active_rows_and_publish_nothing(
    harness: Callable[[Any, str], Harness],
) -> None:
    h = harness(commands, "commands")
    mine, old, theirs, unknown = (stable_id("mem", n) for n in ("mine", "old", "theirs", "unknown"))
    async with h.runtime.pg.transaction("seed") as conn:
        await h.runtime.memories.upsert(conn, record(mine), VECTOR)
        await h.runtime.memories.upsert(conn, record(old, status=MemoryStatus.SUPERSEDED), VECTOR)
        await h.runtime.memories.upsert(conn, record(theirs, user="other"), VECTOR)
    t1, t2 = NOW + timedelta(hours=1), NOW + timedelta(hours=2)
    first = command(1, [mine, old, theirs, unknown], t2)
    second = command(2, [mine], t1)  # applied after, but an earlier access: last access stays t2
    await h.feed([first, first, b"{broken", second], accessed(h, mine, 2))

    rows = await stored(h)
    # Version counts the changes on memory.changes: an access is none of them.
    assert (rows[mine].access_count, rows[mine].last_accessed_at, rows[mine].version) == (2, t2, 1)
    assert rows[mine].updated_at == NOW
    assert (rows[old].access_count, rows[old].version) == (0, 1)  # no longer active: untouched
    assert (rows[theirs].access_count, rows[theirs].version) == (0, 1)  # another user's row: never
    assert unknown not in rows
    assert h.sink("dlq").reasons() == [b"schema_violation"]
    assert h.sink("changes").sent == []  # reads never reach the feed

    # Redelivered commands change nothing; a new one counts.
    await h.feed([first, second, command(3, [mine], t1)], accessed(h, mine, 3))
    rows = await stored(h)
    assert (rows[mine].access_count, rows[mine].last_accessed_at) == (3, t2)
    async with h.runtime.pg.connection("test") as conn:
        cur = await conn.execute("SELECT count(*) AS n FROM applied_commands WHERE tenant_id = 't' AND user_id = 'u'")
        assert await cur.fetchone() == {"n": 3}
    assert h.sink("changes").sent == []


async def test_a_coalesced_mark_adds_its_count_and_keeps_its_latest_access(
    harness: Callable[[Any, str], Harness],
) -> None:
    """The read service sends one mark per memory per window: 7 recalls of `a` are one entry counting 7."""
    h = harness(commands, "commands")
    a, b = stable_id("mem", "a"), stable_id("mem", "b")
    async with h.runtime.pg.transaction("seed") as conn:
        await h.runtime.memories.upsert(conn, record(a), VECTOR)
        await h.runtime.memories.upsert(conn, record(b), VECTOR)
    t1, t2 = NOW + timedelta(minutes=1), NOW + timedelta(minutes=2)
    window = command(1, [a, b], t2, counts=[7, 1], last=[t2, t1])
    await h.feed([window], accessed(h, a, 7))
    rows = await stored(h)
    assert (rows[a].access_count, rows[a].last_accessed_at, rows[a].version) == (7, t2, 1)
    assert (rows[b].access_count, rows[b].last_accessed_at, rows[b].version) == (1, t1, 1)
    assert h.sink("changes").sent == []


def test_tally_counts_each_memory_once_per_command_and_keeps_the_latest_access() -> None:
    a, b = stable_id("mem", "a"), stable_id("mem", "b")
    t1, t2 = NOW, NOW + timedelta(minutes=1)
    cmds = [
        AccessCommand.model_validate_json(command(1, [a, a, b], t2)),
        AccessCommand.model_validate_json(command(2, [a], t1)),
    ]
    assert commands.tally(cmds) == [Access(a, 2, t2), Access(b, 1, t2)]
    coalesced = AccessCommand.model_validate_json(command(3, [a, b], t1, counts=[5, 2], last=[t2, t1]))
    assert commands.tally([*cmds, coalesced]) == [Access(a, 7, t2), Access(b, 3, t2)]


def test_a_coalesced_mark_names_one_count_and_one_time_per_memory() -> None:
    a, b = stable_id("mem", "a"), stable_id("mem", "b")
    with pytest.raises(ValidationError):
        AccessCommand.model_validate_json(command(1, [a, b], NOW, counts=[1]))
    with pytest.raises(ValidationError):
        AccessCommand.model_validate_json(command(1, [a], NOW, counts=[0]))
    with pytest.raises(ValidationError):
        AccessCommand.model_validate_json(command(1, [a, b], NOW, last=[NOW]))
