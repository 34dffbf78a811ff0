"""The window stage's archive output through Faust's test context: one sealed record per accepted event, only."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from agents.window import agent
from schemas import SessionEvent, TurnEvent, chat_event_adapter
from services.archive.codec import open_record, read_record
from services.archive.keys import KeyStore
from services.archive.master import load_master_key
from tests.agents.test_agents import Harness, Sink, harness  # noqa: F401 (the fixture)
from tests.stack import session_end, turn


def keys_of(h: Harness) -> KeyStore:
    """What a replay uses: a store of its own, the master key the stage generated in the data dir."""
    return KeyStore(h.runtime.pg, load_master_key(h.runtime.settings))


async def opened(h: Harness, sink: Sink) -> list[TurnEvent | SessionEvent]:
    records = [read_record(value) for _, value, _ in sink.sent]
    current = await keys_of(h).current({r.owner for r in records})
    return [open_record(r, current[r.owner]) for r in records]


async def test_every_accepted_turn_and_session_end_is_archived_once_sealed_and_nothing_else_is(
    harness: Callable[[Any, str], Harness],  # noqa: F811
) -> None:
    h = harness(agent, "turns")
    archive, dlq = h.sink("archive"), h.sink("dlq")
    said = turn("t", "u", "s", 0, "My locker code is zanzibar-4711.")
    reply = turn("t", "u", "s", 1, "Noted, zanzibar-4711.", role="assistant")
    other = turn("t", "v", "s2", 0, "I am someone else.")
    conflicting = {**said, "content": "My locker code is 0000."}  # a known event id, other content
    end = session_end("t", "u", "s")
    sequence = [said, reply, said, other, conflicting, end, end, reply]
    await h.feed(
        [orjson.dumps(e) for e in sequence] + [b"{broken"], lambda: len(dlq.sent) >= 2 and len(archive.sent) >= 4
    )

    expected = [chat_event_adapter.validate_python(e) for e in (said, reply, other, end)]
    assert await opened(h, archive) == expected  # none for the redeliveries, the conflict or the bad JSON
    assert [key for key, _, _ in archive.sent] == [b"t:u", b"t:u", b"t:v", b"t:u"]
    assert sorted(dlq.reasons()) == [b"conflicting_duplicate", b"invalid_json"]
    for _, value, _ in archive.sent:
        assert b"zanzibar" not in value
        assert b"someone else" not in value
    # One key per user, and the stage left nothing unsent.
    async with h.runtime.pg.connection("test") as conn:
        keys = await (await conn.execute("SELECT tenant_id, user_id FROM user_keys ORDER BY user_id")).fetchall()
        left = await (await conn.execute("SELECT count(*) AS n FROM outbox")).fetchone()
    assert [(k["tenant_id"], k["user_id"]) for k in keys] == [("t", "u"), ("t", "v")]
    assert left is not None
    assert left["n"] == 0

    # The whole sequence redelivered (a replay of chat.turns): nothing is archived again, only the new turn after it.
    sentinel = turn("t", "u", "s", 2, "A new turn.")
    await h.feed([orjson.dumps(e) for e in [*sequence, sentinel]], lambda: len(archive.sent) >= 5)
    assert (await opened(h, archive))[4:] == [chat_event_adapter.validate_python(sentinel)]


async def test_a_crash_after_the_commit_sends_the_same_sealed_bytes_on_redelivery(
    harness: Callable[[Any, str], Harness],  # noqa: F811
) -> None:
    h = harness(agent, "turns")
    archive = h.sink("archive")
    s = h.runtime.settings
    said = turn("t", "u", "s", 0, "Remember the code zanzibar-1234.")
    event = chat_event_adapter.validate_python(said)
    # Committed, then the process died before publishing: the sealed record waits in the outbox.
    keys = KeyStore.from_settings(h.runtime.pg, s, create_master=True)
    limits = agent.window_limits(s)
    committed = await agent.handle_events(h.runtime, [event], limits, keys)
    (stored,) = [m for m in committed if m.topic == "memory.archive"]

    # Kafka redelivers the turn: the stage sends what the outbox kept, once, byte for byte.
    await h.feed([orjson.dumps(said)], lambda: bool(archive.sent))
    assert [value for _, value, _ in archive.sent] == [stored.value]
    assert await opened(h, archive) == [event]


async def test_without_keys_the_stage_logic_archives_nothing(harness: Callable[[Any, str], Harness]) -> None:  # noqa: F811
    """A rebuild replaying memory.archive runs the window logic without keys: it must not archive again."""
    h = harness(agent, "turns")
    s = h.runtime.settings
    limits = agent.window_limits(s)
    event = chat_event_adapter.validate_python(turn("t", "u", "s", 0, "I like tea."))
    messages = await agent.handle_events(h.runtime, [event], limits)
    assert messages
    assert all(m.topic != "memory.archive" for m in messages)
