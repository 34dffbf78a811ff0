"""A generation's window through Faust's test context: it reads memory.archive, opens what it can, archives nothing.

The records are what the default generation's window seals; a forgotten user's are skipped and counted, a
record that does not open goes to the DLQ with its reason, and the events inside flow on exactly as turns
from chat.turns would.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import faust
import orjson
import pytest

from agents.topics import Topics
from agents.window import agent
from schemas import chat_event_adapter
from services.archive.codec import seal
from services.archive.keys import KeyStore
from services.core import metrics
from services.core.config import Settings
from services.core.topics import BY_ROLE as TOPIC_NAMES
from services.runtime import Runtime
from services.stores.postgres import migrate
from tests.agents.test_agents import Harness, Sink
from tests.stack import session_end, turn


@pytest.fixture
async def generation_window(tmp_path: Path, pg_dsn: str) -> AsyncIterator[Harness]:
    settings = Settings(data_dir=tmp_path, pg_dsn=pg_dsn, generation="v2", master_key=_master())
    runtime = Runtime.create(settings)
    await migrate(pg_dsn)
    await runtime.pg.open()
    app = faust.App("test-generation-window", broker="kafka://127.0.0.1:1", store="memory://", web_enabled=False)
    archive = app.topic(
        TOPIC_NAMES["archive"], key_type=bytes, value_type=bytes, key_serializer="raw", value_serializer="raw"
    )
    topics = Topics(archive=archive, **{role: Sink(name) for role, name in TOPIC_NAMES.items() if role != "archive"})
    agent.register(app, topics, runtime)
    yield Harness(app, agent.STAGE, topics, runtime)
    await runtime.index.close()
    await runtime.pg.close()


def _master() -> str:
    from services.archive.codec import MasterKey

    return MasterKey.generate_base64()


def skipped_forgotten() -> float:
    return metrics.ARCHIVE_SKIPPED.labels(reason="forgotten")._value.get()


async def test_a_generation_window_opens_the_archive_skips_the_forgotten_and_dead_letters_what_does_not_open(
    generation_window: Harness,
) -> None:
    h = generation_window
    assert agent.window_input(h.topics, h.runtime.settings) is h.topics.archive
    keys = KeyStore.from_settings(h.runtime.pg, h.runtime.settings)
    ann = [turn("t", "ann", "s", 0, "I live in Lisbon and I love green tea."), session_end("t", "ann", "s")]
    bob = turn("t", "bob", "s", 0, "I live in Oslo.")
    async with h.runtime.pg.transaction("keys") as conn:
        found = await keys.for_writing(conn, [("t", "ann"), ("t", "bob")])
    sealed = [seal(found[("t", e["user_id"])], chat_event_adapter.validate_python(e)) for e in (*ann, bob)]
    tampered = orjson.loads(sealed[0]) | {"session_id": "elsewhere"}  # a clear field edited: it no longer opens
    async with h.runtime.pg.transaction("forget") as conn:
        assert await keys.forget(conn, "t", "bob")
    before = skipped_forgotten()
    candidates, evicted, dlq, turns = h.sink("candidates"), h.sink("evicted"), h.sink("dlq"), h.sink("turns")

    await h.feed(
        [sealed[2], orjson.dumps(tampered), b"{not a record", *sealed[:2]],
        lambda: len(dlq.sent) >= 2 and bool(evicted.sent),
    )

    assert sorted(dlq.reasons()) == [b"archive_unreadable", b"archive_unreadable"]
    assert skipped_forgotten() - before == 1  # bob's turn: his key is gone
    assert {c["user_id"] for c in candidates.values()} == {"ann"}
    assert "User lives in Lisbon" in {c["text"] for c in candidates.values()}
    assert {e["user_id"] for e in evicted.values()} == {"ann"}  # the session end closed ann's window
    # A generation never archives its input again (its only source is the archive), nor writes chat.turns.
    assert not (await h.runtime.outbox.stale(older_than_seconds=0, limit=10))
    assert turns.sent == []
    async with h.runtime.pg.connection("test") as conn:
        stored = await (await conn.execute("SELECT user_id, event_id FROM turns")).fetchall()
    assert [(r["user_id"], r["event_id"]) for r in stored] == [("ann", ann[0]["event_id"])]
