"""The commands agent applying memory commands through Faust's test context, over a real Postgres and the real
model: what each command writes, records for `?wait=true` and publishes on `memory.changes`; forget and import.

The qdrant sink is driven the same way for a forgotten user.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from agents.consolidator import command_plan as plan
from agents.consolidator import commands
from schemas import MemoryRecord, MemoryStatus, codec
from schemas.commands import (
    AddMemory,
    CorrectMemory,
    DeleteMemory,
    DeleteSession,
    DeleteTopic,
    ForgetUser,
    UserForgotten,
)
from schemas.export import ExportDocument
from services.core.command_rules import new_memory_id
from services.core.import_parts import import_parts
from services.core.textutil import stable_id
from services.stores.postgres import ChunkMark, record_from_row
from services.stores.postgres.commands import CommandStore
from services.stores.postgres.records import RECORD_COLUMNS
from services.stores.vector import IndexedMemory, Scope
from tests.agents.test_agents import Harness
from tests.agents.test_agents import harness as harness  # the fixture
from tests.factories import turn_event
from tests.index_probe import search
from tests.store_reads import export_user
from tests.user_rows import rows_naming

NOW = datetime(2026, 5, 1, tzinfo=UTC)


def envelope(n: str, user: str = "u", tenant: str = "t", at: datetime = NOW) -> dict[str, Any]:
    return {"command_id": stable_id("cmd", tenant, user, n), "tenant_id": tenant, "user_id": user, "at": at}


def raw(command: Any) -> bytes:
    return codec.dumps(command)


def add(n: str, text: str, user: str = "u", **fields: Any) -> AddMemory:
    env = envelope(n, user)
    memory_id = new_memory_id("t", user, env["command_id"])
    return AddMemory.model_validate({**env, "memory_id": memory_id, "type": "preference", "text": text, **fields})


async def rows(h: Harness, user: str = "u") -> dict[str, MemoryRecord]:
    async with h.runtime.pg.connection("test") as conn:
        cur = await conn.execute(f"SELECT {RECORD_COLUMNS} FROM memories WHERE user_id = %s", (user,))
        return {r.id: r for r in map(record_from_row, await cur.fetchall())}


async def outcome(h: Harness, command_id: str, user: str = "u") -> list[dict[str, Any]] | None:
    async with h.runtime.pg.connection("test") as conn:
        return (await CommandStore().outcomes(conn, "t", user, [command_id])).get(command_id)


def claimed(dsn: str, command_id: str) -> bool:
    """Applied (the agent's claim committed): read outside the agent's loop, as `feed` needs."""
    with psycopg.connect(dsn) as conn:
        return (
            conn.execute("SELECT 1 FROM applied_commands WHERE command_id = %s", (command_id,)).fetchone() is not None
        )


def published(h: Harness) -> list[dict[str, Any]]:
    """memory.changes as sent: sealed envelopes (their clear fields: ids, op, cause) and `forgotten` messages."""
    return h.sink("changes").values()


def caused_by(h: Harness, command_id: str) -> Callable[[], bool]:
    return lambda: any(command_id in c.get("cause", []) for c in published(h))


async def test_add_correct_and_delete_write_history_record_outcomes_and_publish_changes(
    harness: Callable[[Any, str], Harness], pg_dsn: str
) -> None:
    h = harness(commands, "commands")
    tea = add("1", "I love green tea in the morning")
    fact = add("2", "Lives in Berlin", type="fact", category="location", key_name="city", value="Berlin")
    await h.feed([raw(tea), raw(fact), raw(tea)], caused_by(h, fact.command_id))
    held = await rows(h)
    assert set(held) == {tea.memory_id, fact.memory_id}  # the redelivered add changed nothing
    assert held[tea.memory_id].source.metadata[0]["source"] == "manual"
    assert await outcome(h, tea.command_id) == [
        {"id": tea.memory_id, "op": "added", "status": "active", "version": 1, "indexed": True}
    ]
    first = [c for c in await h.changes() if tea.command_id in c["cause"]]
    assert len(first) == 1
    assert len(first[0]["vector"]) == 384  # embedded by the worker's model
    assert {key for key, _, _ in h.sink("changes").sent} == {b"t:u"}

    # A manual fact with a new value supersedes the old one, like any candidate.
    moved = add("3", "Lives in Hamburg", type="fact", category="location", key_name="city", value="Hamburg")
    correct = CorrectMemory.model_validate(
        {**envelope("4"), "memory_id": tea.memory_id, "new_id": stable_id("tea-v2"), "text": "I love matcha"}
    )
    await h.feed([raw(moved), raw(correct)], caused_by(h, correct.command_id))
    held = await rows(h)
    assert held[fact.memory_id].status is MemoryStatus.SUPERSEDED
    assert held[fact.memory_id].superseded_by == moved.memory_id
    old, new = held[tea.memory_id], held[correct.new_id]
    assert (old.status, old.superseded_by, old.text) == (MemoryStatus.SUPERSEDED, new.id, tea.text)
    assert (new.status, new.text, new.version) == (MemoryStatus.ACTIVE, "I love matcha", 1)
    ops = {(c["op"], c["record"]["id"]) for c in await h.changes() if correct.command_id in c["cause"]}
    assert ops == {("superseded", tea.memory_id), ("added", correct.new_id)}
    async with h.runtime.pg.connection("history") as conn:
        embedded = await h.runtime.memories.with_vector(conn, "t", "u", correct.new_id)
    assert embedded is not None
    assert embedded[1] is not None
    assert len(embedded[1]) == 384  # re-embedded

    # Deletes: one, by session, by topic; the rows stay as `deleted` (history), out of the index.
    session_pref = add("5", "Enjoys long walks", session_id="s9")
    other_pref = add("6", "Prefers window seats")
    await h.feed([raw(session_pref), raw(other_pref)], caused_by(h, other_pref.command_id))
    by_session = DeleteSession.model_validate({**envelope("7"), "session_id": "s9"})
    by_topic = DeleteTopic.model_validate({**envelope("8"), "topic": "matcha"})
    one = DeleteMemory.model_validate({**envelope("9"), "memory_id": other_pref.memory_id})
    nothing = DeleteTopic.model_validate({**envelope("10"), "topic": "skydiving"})
    await h.feed([raw(c) for c in (by_session, by_topic, one, nothing)], caused_by(h, one.command_id))
    held = await rows(h)
    for gone in (session_pref.memory_id, correct.new_id, other_pref.memory_id):
        assert held[gone].status is MemoryStatus.DELETED
        assert held[gone].superseded_at == NOW
    assert [r.text for r in held.values() if r.status is MemoryStatus.ACTIVE] == ["Lives in Hamburg"]
    deletes = [c for c in await h.changes() if c["op"] == "deleted"]
    assert {c["record"]["id"] for c in deletes} == {session_pref.memory_id, correct.new_id, other_pref.memory_id}
    assert all(c["vector"] is None for c in deletes)
    assert await outcome(h, nothing.command_id) == []  # applied, nothing to do: a waiting client is answered

    # A correction of a memory that is no longer active (a race past the API's 409) changes nothing.
    late = CorrectMemory.model_validate(
        {**envelope("11"), "memory_id": tea.memory_id, "new_id": stable_id("tea-v3"), "text": "too late"}
    )
    await h.feed([raw(late)], lambda: claimed(pg_dsn, late.command_id))
    assert await outcome(h, late.command_id) == []
    assert stable_id("tea-v3") not in await rows(h)


async def _pause() -> None:
    await asyncio.sleep(0.02)


async def test_forgetting_a_user_deletes_every_row_naming_them_and_publishes_no_text(
    harness: Callable[[Any, str], Harness], pg_dsn: str
) -> None:
    h = harness(commands, "commands")
    rt = h.runtime
    turns = [turn_event(0, "I love green tea"), turn_event(1, "Noted!")]
    async with rt.pg.transaction("seed") as conn:
        for t in turns:
            await rt.windows.archive_turn(conn, t)
        await rt.windows.save_window(conn, "t", "u", "s", turns, 5)
    await rt.summaries.save("t", "u", "s", "tea talk", ChunkMark.of(turns))
    mine, theirs = add("1", "I love green tea"), add("2", "I love green tea", user="other")
    await h.feed([raw(mine), raw(theirs)], caused_by(h, theirs.command_id))
    assert set(rows_naming(pg_dsn, "t", "u")) == {
        "applied_commands",
        "memories",
        "memory_centroids",  # the kept sums of the user's active embeddings
        "session_summaries",
        "sessions",
        "turns",
        "user_keys",  # sealing the user's changes made their data key
    }
    before_other = rows_naming(pg_dsn, "t", "other")

    late_add = add("3", "Secret hobby: juggling")
    forget = ForgetUser.model_validate(envelope("4"))
    await h.feed([raw(late_add), raw(forget)], lambda: any(c["op"] == "forgotten" for c in published(h)))
    assert rows_naming(pg_dsn, "t", "u") == {}
    assert rows_naming(pg_dsn, "t", "other") == before_other
    after = [c for c in published(h) if forget.command_id in c["cause"]]
    (gone,) = after
    assert UserForgotten.model_validate(gone).deleted_rows["memories"] == 2
    # The add in the same batch as the forget was never published: its text is not on the log after the forget.
    assert not any(late_add.command_id in c["cause"] for c in published(h))
    assert not any(b"juggling" in value for _, value, _ in h.sink("changes").sent)
    # And what the user's earlier changes hold is out of reach: their key went with them.
    assert any(c["user_id"] == "u" and c["op"] == "added" for c in published(h))
    assert {(c["user_id"], c["op"]) for c in await h.changes()} == {("other", "added"), ("u", "forgotten")}


async def test_the_sink_empties_a_forgotten_users_scope_between_the_changes_around_it(
    harness: Callable[[Any, str], Harness], monkeypatch: pytest.MonkeyPatch
) -> None:
    from agents.qdrant_sink import agent

    h = harness(agent, "changes")
    await h.runtime.index.ensure(4)
    bob = add("b", "bob's tea", user="bob")
    stale = add("s", "about to be forgotten")
    fresh = add("f", "said after the forget")
    await h.runtime.index.upsert(
        [IndexedMemory(stable_id("old"), [1.0, 0, 0, 0], h.runtime.bm25.document("old"), _payload("u", 1))]
    )

    async def change(cmd: AddMemory) -> bytes:
        item = plan.add_candidate(cmd, [1.0, 0.0, 0.0, 0.0], "m")
        record = MemoryRecord(
            id=cmd.memory_id,
            tenant_id="t",
            user_id=cmd.user_id,
            type=cmd.type,
            text=cmd.text,
            content_hash="h",
            importance=0.5,
            confidence=1.0,
            status=MemoryStatus.ACTIVE,
            observed_at=NOW,
            created_at=NOW,
            updated_at=NOW,
            source=item.candidate.source,
        )
        return await h.sealed(plan.change(record, plan.import_op(record), item.vector, [cmd.command_id], NOW))

    # Watch (not replace) the real index: the feed is over once the last change is upserted.
    upserted: list[str] = []
    real_upsert = h.runtime.index.upsert

    async def watched(points: Sequence[IndexedMemory]) -> None:
        await real_upsert(points)
        upserted.extend(p.id for p in points)

    monkeypatch.setattr(h.runtime.index, "upsert", watched)
    gone = UserForgotten(tenant_id="t", user_id="u", cause=["x"], committed_at=NOW)
    feed = [await change(bob), await change(stale), raw(gone), await change(fresh)]
    await h.feed(feed, lambda: fresh.memory_id in upserted)
    assert await h.runtime.index.versions("t", "u", [stale.memory_id, fresh.memory_id, stable_id("old")]) == {
        fresh.memory_id: 1
    }
    assert await h.runtime.index.count_scope("t", "bob") == 1
    hits = await search(h.runtime.index, Scope("t", "u"), [1.0, 0, 0, 0], h.runtime.bm25.query("forget"), 10)
    assert [hit.payload["text"] for hit in hits] == ["said after the forget"]
    assert h.sink("dlq").sent == []


def _payload(user: str, version: int) -> Any:
    return {
        "tenant_id": "t",
        "user_id": user,
        "type": "preference",
        "status": "active",
        "text": "old",
        "version": version,
    }


def normalized(doc: ExportDocument) -> Any:
    """The document without what an import into another user must change: tenant and user ids, the export time."""

    def strip(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k not in ("tenant_id", "user_id", "exported_at")}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value

    return strip(doc.model_dump(mode="json"))


async def test_export_import_export_round_trips_into_another_tenant_and_user_and_back_home(
    harness: Callable[[Any, str], Harness], pg_dsn: str
) -> None:
    h = harness(commands, "commands")
    rt = h.runtime
    turns = [turn_event(0, "I live in Berlin and love green tea"), turn_event(1, "Noted!")]
    async with rt.pg.transaction("seed") as conn:
        for t in turns:
            await rt.windows.archive_turn(conn, t)
        await rt.windows.save_window(conn, "t", "u", "s", turns, 9, closed_at=NOW, end_event_id="end")
    await rt.summaries.save("t", "u", "s", "berlin and tea", ChunkMark.of(turns))
    tea = add("1", "I love green tea")
    fact = add("2", "Lives in Berlin", type="fact", category="location", key_name="city", value="Berlin")
    fix = CorrectMemory.model_validate(
        {**envelope("3"), "memory_id": tea.memory_id, "new_id": stable_id("tea-2"), "text": "I love matcha"}
    )
    await h.feed([raw(tea), raw(fact), raw(fix)], caused_by(h, fix.command_id))
    async with rt.pg.connection("export") as conn:
        source = await export_user(conn, "t", "u", exported_at=NOW, embedding_model="all-MiniLM-L6-v2")
    assert len(source.memories) == 3
    assert len(source.vectors) == 3

    # Small parts, so the import really is several commands applied in order.
    parts = import_parts(source, "t2", "v", stable_id("import-1"), NOW, 24 * 1024)
    assert len(parts) > 1
    await h.feed([raw(p) for p in parts], caused_by(h, parts[-1].command_id))
    async with rt.pg.connection("export") as conn:
        copy = await export_user(
            conn, "t2", "v", exported_at=NOW + timedelta(days=1), embedding_model="all-MiniLM-L6-v2"
        )
    assert (copy.tenant_id, copy.user_id) == ("t2", "v")
    assert normalized(copy) == normalized(source)
    assert {m.id for m in copy.memories} == {m.id for m in source.memories}  # the document's ids, not the new rows'
    stored = await rows(h, "v")
    assert not set(stored) & {m.id for m in source.memories}  # ids are global: the copy's rows have their own
    assert {r.status for r in stored.values()} == {MemoryStatus.ACTIVE, MemoryStatus.SUPERSEDED}
    opened = await h.changes()
    copied = {c["record"]["id"] for c in opened if parts[0].import_id in c["cause"]}
    assert copied == set(stored)
    assert all(
        (c["vector"] is not None) == (c["record"]["status"] == "active")
        for c in opened
        if parts[0].import_id in c["cause"]
    )

    # Home again: forget the user, import their own document: the export is the document again.
    await h.feed(
        [raw(ForgetUser.model_validate(envelope("9")))], lambda: any(c["op"] == "forgotten" for c in published(h))
    )
    assert rows_naming(pg_dsn, "t", "u") == {}
    home = import_parts(source, "t", "u", stable_id("import-2"), NOW, 900 * 1024)
    await h.feed([raw(p) for p in home], caused_by(h, home[-1].command_id))
    async with rt.pg.connection("export") as conn:
        back = await export_user(conn, "t", "u", exported_at=NOW, embedding_model="all-MiniLM-L6-v2")
    assert back == source
    # Even at home the rows get ids of their own: a document's ids are never written as they are.
    assert not set(await rows(h, "u")) & {m.id for m in source.memories}

    # The copy's own export names the original's ids, which the original holds again: a third user gets new ones.
    third = import_parts(copy, "t2", "w", stable_id("import-3"), NOW, 900 * 1024)
    await h.feed([raw(p) for p in third], caused_by(h, third[-1].command_id))
    async with rt.pg.connection("export") as conn:
        again = await export_user(conn, "t2", "w", exported_at=NOW, embedding_model="all-MiniLM-L6-v2")
    assert normalized(again) == normalized(source)
    assert not set(await rows(h, "w")) & ({m.id for m in source.memories} | set(stored))
    assert h.sink("dlq").sent == []


async def _memories(h: Harness, tenant: str, user: str) -> dict[str, MemoryRecord]:
    async with h.runtime.pg.connection("test") as conn:
        cur = await conn.execute(
            f"SELECT {RECORD_COLUMNS} FROM memories WHERE tenant_id = %s AND user_id = %s", (tenant, user)
        )
        return {r.id: r for r in map(record_from_row, await cur.fetchall())}


async def test_an_import_never_writes_under_the_documents_ids_and_repeats_to_the_same_rows(
    harness: Callable[[Any, str], Harness],
) -> None:
    """Another tenant's admin imports a document naming tenant t's ids: those t holds, and one t has yet to use."""
    h = harness(commands, "commands")
    rt = h.runtime
    tea = add("1", "I love green tea")
    fact = add("2", "Lives in Berlin", type="fact", category="location", key_name="city", value="Berlin")
    await h.feed([raw(tea), raw(fact)], caused_by(h, fact.command_id))
    async with rt.pg.connection("export") as conn:
        source = await export_user(conn, "t", "u", exported_at=NOW, embedding_model=None)
    victim = await _memories(h, "t", "u")
    later = add("3", "I collect stamps")  # t's next memory: its id is named before t writes it
    unkeyed = next(m for m in source.memories if m.key_name is None)
    squat = unkeyed.model_copy(update={"id": later.memory_id, "text": "planted by another tenant"})
    doc = source.model_copy(update={"tenant_id": "t-evil", "memories": [*source.memories, squat]})
    doc_ids = {m.id for m in doc.memories}

    first = import_parts(doc, "t-evil", "x", stable_id("import-a"), NOW, 900 * 1024)
    await h.feed([raw(p) for p in first], caused_by(h, first[-1].command_id))
    imported = await _memories(h, "t-evil", "x")
    assert len(imported) == len(doc.memories)
    assert not set(imported) & doc_ids
    assert await _memories(h, "t", "u") == victim
    published_ids = {c["record"]["id"] for c in await h.changes() if first[0].import_id in c["cause"]}
    assert published_ids == set(imported)

    # t's own add gets the id that was named, and the importer's rows stay theirs.
    await h.feed([raw(later)], caused_by(h, later.command_id))
    mine = await _memories(h, "t", "u")
    assert mine[later.memory_id].text == "I collect stamps"
    assert await _memories(h, "t-evil", "x") == imported

    # The same document imported again (a retried import: another import id) writes the same rows.
    again = import_parts(doc, "t-evil", "x", stable_id("import-b"), NOW, 900 * 1024)
    await h.feed([raw(p) for p in again], caused_by(h, again[-1].command_id))
    assert set(await _memories(h, "t-evil", "x")) == set(imported)
    assert h.sink("dlq").sent == []
