"""Commands in memory.archive through Faust's test context, over a real Postgres and the real model.

The default generation's commands stage seals every applied command but access marks into the archive, in the
order it applied them, once (a redelivery archives nothing), a forget as a marker in clear. A generation's
commands stage fed those records (and the chat events beside them, which it passes over) re-derives the same
memory into emptied tables: the deleted stays deleted, the correction and the manual add stay; a forget of a
user who came back is not replayed.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import faust
import psycopg
import pytest

from agents.consolidator import commands
from agents.topics import Topics
from schemas import chat_event_adapter
from schemas.commands import AccessCommand, CorrectMemory, DeleteMemory, ForgetUser
from services.archive.codec import open_command, read_record, seal
from services.core.config import Settings
from services.core.textutil import stable_id
from services.core.topics import BY_ROLE as TOPIC_NAMES
from services.runtime import Runtime
from services.stores.postgres import migrate
from tests.agents.test_agents import Harness, Sink
from tests.agents.test_agents import harness as harness  # the fixture
from tests.agents.test_memory_commands import add, claimed, envelope, raw
from tests.stack import turn

# Not `version` or access columns: access marks are not memory and are not replayed.
COLUMNS = "id, user_id, type, text, status, superseded_by, superseded_at, observed_at, source_session_id"


def memory_rows(dsn: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as conn:
        return list(conn.execute(f"SELECT {COLUMNS} FROM memories ORDER BY id"))


@pytest.fixture
async def generation_commands(tmp_path: Path, pg_dsn: str) -> AsyncIterator[Callable[..., Awaitable[Harness]]]:
    """A generation's commands stage, reading memory.archive (or `source`); built on demand (after the default's run)."""
    made: list[Runtime] = []

    async def build(source: str = "archive") -> Harness:
        # The default harness's data dir: the same master key opens the users' keys.
        runtime = Runtime.create(
            Settings(data_dir=tmp_path, pg_dsn=pg_dsn, generation="v2", consolidate_batch_within=0.01)
        )
        made.append(runtime)
        await runtime.pg.open()
        app = faust.App("test-generation-commands", broker="kafka://127.0.0.1:1", store="memory://", web_enabled=False)
        inbound = app.topic(
            TOPIC_NAMES[source], key_type=bytes, value_type=bytes, key_serializer="raw", value_serializer="raw"
        )
        others = {role: Sink(name) for role, name in TOPIC_NAMES.items() if role != source}
        topics = Topics(**{source: inbound}, **others)
        commands.register(app, topics, runtime)
        return Harness(app, commands.STAGE if source == "archive" else commands.ACCESS_STAGE, topics, runtime)

    await migrate(pg_dsn)
    yield build
    for runtime in made:
        await runtime.index.close()
        await runtime.pg.close()


async def test_applied_commands_are_archived_in_order_and_a_generation_replays_them_from_there(
    harness: Callable[[Any, str], Harness], generation_commands: Callable[[], Awaitable[Harness]], pg_dsn: str
) -> None:
    h = harness(commands, "commands")
    tea, walks = add("1", "I love green tea in the morning"), add("2", "Enjoys long walks")
    correct = CorrectMemory.model_validate(
        {**envelope("3"), "memory_id": tea.memory_id, "new_id": stable_id("tea-v2"), "text": "I love matcha"}
    )
    delete = DeleteMemory.model_validate({**envelope("4"), "memory_id": walks.memory_id})
    access = AccessCommand.model_validate({**envelope("5"), "memory_ids": [correct.new_id]})
    gone = add("6", "I collect stamps", user="gone")
    forget = ForgetUser.model_validate(envelope("7", user="gone"))
    await h.feed(
        [raw(c) for c in (tea, walks, correct, delete, access, gone)], lambda: claimed(pg_dsn, gone.command_id)
    )
    # A forget leaves no claim (its own goes with the user's rows); its changes' message says it was applied.
    await h.feed([raw(forget)], lambda: any(c["op"] == "forgotten" for c in h.sink("changes").values()))
    # Redeliveries are applied once and archived once; "gone" comes back (a new key) and adds a memory.
    returned = add("8", "I collect coins", user="gone")
    await h.feed([raw(tea), raw(delete), raw(returned)], lambda: claimed(pg_dsn, returned.command_id))

    sent = [value for _, value, _ in h.sink("archive").sent]
    records = [read_record(value) for value in sent]
    assert [(r.user_id, r.type, r.event_id) for r in records] == [
        ("u", "command", tea.command_id),
        ("u", "command", walks.command_id),
        ("u", "command", correct.command_id),
        ("u", "command", delete.command_id),  # no access mark: read traffic, not memory
        ("gone", "command", gone.command_id),
        ("gone", "forgotten", forget.command_id),
        ("gone", "command", returned.command_id),
    ]
    keys = await h.runtime.keys.current([("t", "u"), ("t", "gone")])
    assert [open_command(r, keys[("t", "u")]) for r in records[:4]] == [tea, walks, correct, delete]
    assert open_command(records[6], keys[("t", "gone")]) == returned
    assert records[4].key_id != records[6].key_id  # the forget deleted the key that sealed the first add
    marker = records[5]
    assert (marker.key_id, marker.nonce, marker.ciphertext) == ("", "", "")  # ids only: the key went with the user
    assert not any(b"stamps" in value or b"matcha" in value or b"coins" in value for value in sent)
    live = memory_rows(pg_dsn)
    assert {(r[1], r[3], r[4]) for r in live} == {
        ("u", "I love green tea in the morning", "superseded"),
        ("u", "I love matcha", "active"),
        ("u", "Enjoys long walks", "deleted"),
        ("gone", "I collect coins", "active"),
    }

    # A generation: the same memory again, from the archive alone, into emptied tables. The chat events beside
    # the commands are passed over; the old forget is not replayed (its user came back), the old add does not
    # open (its key is gone).
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("TRUNCATE memories, applied_commands, outbox")
    event = seal(keys[("t", "u")], chat_event_adapter.validate_python(turn("t", "u", "s", 0, "hello")))
    replay = await generation_commands()
    await replay.feed([event, *sent], lambda: claimed(pg_dsn, returned.command_id))

    assert memory_rows(pg_dsn) == live
    # A generation never archives again (the archive is its input): nothing waits in its outbox, and every
    # message it sent is a change of its own.
    assert not await replay.runtime.outbox.stale(older_than_seconds=0, limit=10)
    assert replay.sink("changes").sent
    assert replay.sink("dlq").sent == []


async def test_a_generation_counts_access_marks_from_memory_commands_and_applies_nothing_else_from_there(
    harness: Callable[[Any, str], Harness], generation_commands: Callable[..., Awaitable[Harness]], pg_dsn: str
) -> None:
    h = harness(commands, "commands")
    tea = add("1", "I love green tea in the morning")
    await h.feed([raw(tea)], lambda: claimed(pg_dsn, tea.command_id))
    access = AccessCommand.model_validate({**envelope("2"), "memory_ids": [tea.memory_id]})
    walks = add("3", "Enjoys long walks")  # archived by the default: a generation takes it from the archive only
    serving = await generation_commands("commands")

    def counted() -> bool:
        with psycopg.connect(pg_dsn) as conn:
            row = conn.execute("SELECT access_count FROM memories WHERE id = %s", (tea.memory_id,)).fetchone()
        return row is not None and row[0] == 1

    await serving.feed([raw(walks), raw(access)], counted)
    assert not claimed(pg_dsn, walks.command_id)
    assert serving.sink("changes").sent == []  # an access mark publishes nothing
