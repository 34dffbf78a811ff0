"""The consolidator with a configured LLM (the fake server) and real Postgres, through Faust's test context.

The model's ADD / UPDATE / DELETE / NONE verdict over a candidate's nearest
active memories is applied in the batch's transaction; a garbage verdict is
dead-lettered and the rule path stores the candidate anyway.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import faust
import orjson
import pytest

from agents.consolidator import agent
from agents.consolidator.agent import consolidate
from agents.topics import Topics
from schemas import EmbeddedCandidate, MemoryCandidate, MemoryStatus, MemoryType, Provenance, codec
from services.core.config import Settings
from services.core.textutil import stable_id
from services.core.topics import BY_ROLE as TOPIC_NAMES
from services.runtime import Runtime
from services.stores.postgres import migrate
from tests.agents.test_agents import Harness, Sink
from tests.llm.fake_openai import FakeOpenAI, Reply, answer

T0 = datetime(2026, 5, 1, tzinfo=UTC)
OLD_ID = stable_id("pref-tea")
COFFEE, JAZZ, FAR = stable_id("pref-coffee"), stable_id("pref-jazz"), stable_id("pref-far")


def preference(candidate_id: str, text: str, event: str, vector: list[float], hours: int = 0) -> EmbeddedCandidate:
    c = MemoryCandidate(
        candidate_id=candidate_id,
        tenant_id="t",
        user_id="u",
        type=MemoryType.PREFERENCE,
        text=text,
        importance=0.7,
        confidence=0.8,
        observed_at=T0 + timedelta(hours=hours),
        source=Provenance(session_id="s", event_ids=[event]),
        extractor="rules/v1",
    )
    return EmbeddedCandidate(tenant_id="t", user_id="u", candidate=c, vector=vector, model="m")


OLD = preference(OLD_ID, "User preference: I drink green tea every morning.", "e1", [1.0, 0.0, 0.0])
# Similar enough to be shown to the model (cosine 0.8), far from a rule merge (0.92).
NEW = preference(COFFEE, "User preference: I switched to black coffee in the mornings.", "e2", [0.8, 0.6, 0.0], 1)


@pytest.fixture
async def consolidator(tmp_path: Path, pg_dsn: str, fake: FakeOpenAI) -> AsyncIterator[Callable[[], Harness]]:
    settings = Settings(
        data_dir=tmp_path,
        pg_dsn=pg_dsn,
        consolidate_batch_within=0.01,
        llm_base_url=fake.base_url,
        llm_timeout=2.0,
        llm_max_retries=0,
    )
    runtime = Runtime.create(settings)
    await migrate(pg_dsn)
    await runtime.pg.open()
    async with runtime.pg.transaction("reset") as conn:
        await conn.execute("DELETE FROM memories WHERE tenant_id = 't' AND user_id = 'u'")
    await consolidate(runtime, [OLD])  # the rule path: no verdicts, no request

    def build() -> Harness:
        app = faust.App("test-consolidator-llm", broker="kafka://127.0.0.1:1", store="memory://", web_enabled=False)
        inbound = app.topic(
            TOPIC_NAMES["embedded"], key_type=bytes, value_type=bytes, key_serializer="raw", value_serializer="raw"
        )
        sinks = {attr: Sink(name) for attr, name in TOPIC_NAMES.items() if attr != "embedded"}
        topics = Topics(embedded=inbound, **sinks)
        agent.register(app, topics, runtime)
        return Harness(app, agent.STAGE, topics, runtime)

    yield build
    await runtime.index.close()
    await runtime.pg.close()


async def memory_ids(h: Harness, *candidate_ids: str) -> list[str]:
    """What the agent makes of these candidate ids: memory ids under the user's key."""
    key = await h.runtime.keys.get_or_create("t", "u")
    return [key.memory_id(c) for c in candidate_ids]


async def statuses(h: Harness) -> dict[str, str]:
    async with h.runtime.pg.connection("test") as conn:
        cur = await conn.execute("SELECT id, status FROM memories WHERE tenant_id = 't' AND user_id = 'u'")
        return {r["id"]: r["status"] for r in await cur.fetchall()}


async def test_update_supersedes_the_target_with_the_models_reason(
    consolidator: Callable[[], Harness], fake: FakeOpenAI
) -> None:
    h = consolidator()
    changes = h.sink("changes")
    fake.queue(answer({"action": "UPDATE", "target_id": OLD_ID, "reason": "the morning drink changed"}))
    await h.feed([codec.dumps(NEW)], lambda: len(changes.sent) >= 2)
    ops = [(c["op"], c["record"]["id"], c["reason"]) for c in await h.changes()]
    (coffee,) = await memory_ids(h, COFFEE)
    assert ops == [
        ("superseded", OLD_ID, "llm UPDATE: the morning drink changed"),
        ("added", coffee, "llm UPDATE: the morning drink changed"),
    ]
    assert await statuses(h) == {OLD_ID: "superseded", coffee: "active"}
    (request,) = fake.requests
    prompt = request["messages"][-1]["content"]
    assert f"id={OLD_ID}" in prompt
    assert NEW.candidate.text in prompt


async def test_delete_retires_the_target_and_stores_nothing(
    consolidator: Callable[[], Harness], fake: FakeOpenAI
) -> None:
    h = consolidator()
    changes = h.sink("changes")
    fake.queue(answer({"action": "DELETE", "target_id": OLD_ID, "reason": "no longer true"}))
    await h.feed([codec.dumps(NEW)], lambda: bool(changes.sent))
    (change,) = await h.changes()
    assert (change["op"], change["record"]["status"], change["vector"]) == ("deleted", "deleted", None)
    assert await statuses(h) == {OLD_ID: MemoryStatus.DELETED.value}


async def test_none_stores_nothing_and_add_takes_the_rule_path(
    consolidator: Callable[[], Harness], fake: FakeOpenAI
) -> None:
    h = consolidator()
    changes = h.sink("changes")
    jazz = preference(JAZZ, "User preference: I like jazz on drives.", "e3", [0.7, 0.0, 0.714], 2)
    far = preference(FAR, "User preference: I prefer aisle seats.", "e4", [0.0, 0.0, 1.0], 3)
    fake.queue(answer({"action": "NONE", "reason": "already known"}))
    # `far` costs no request; once its change is out, the batch holding NEW was decided.
    await h.feed([codec.dumps(NEW), codec.dumps(far)], lambda: bool(changes.sent))
    fake.queue(answer({"action": "ADD"}))
    await h.feed([codec.dumps(jazz)], lambda: len(changes.sent) >= 2)
    far_id, jazz_id = await memory_ids(h, FAR, JAZZ)
    assert [(c["op"], c["record"]["id"]) for c in await h.changes()] == [("added", far_id), ("added", jazz_id)]
    assert await statuses(h) == {OLD_ID: "active", far_id: "active", jazz_id: "active"}
    assert len(fake.requests) == 2


async def test_garbage_twice_is_dead_lettered_and_the_rule_path_stores_the_candidate(
    consolidator: Callable[[], Harness], fake: FakeOpenAI
) -> None:
    h = consolidator()
    changes, dlq = h.sink("changes"), h.sink("dlq")
    fake.queue(Reply(content="sure! I'd UPDATE it"), answer({"action": "UPDATE", "target_id": "made-up"}))
    await h.feed([codec.dumps(NEW)], lambda: bool(changes.sent) and bool(dlq.sent))
    assert dlq.reasons() == [b"llm_invalid_output"]
    key, _, headers = dlq.sent[0]
    (value,) = await h.dead_letters()
    assert value is not None
    assert (key, orjson.loads(value)["candidate"]["candidate_id"]) == (b"t:u", COFFEE)
    assert headers is not None
    error = headers["x-memstream-error"].decode()
    assert error.startswith("llm decide: invalid_output: target_id")
    # The letter is sealed for its user and its header stays in clear: what the model quoted is redacted.
    assert "made-up" not in error
    (coffee,) = await memory_ids(h, COFFEE)
    assert [(c["op"], c["record"]["id"]) for c in await h.changes()] == [("added", coffee)]
    assert await statuses(h) == {OLD_ID: "active", coffee: "active"}


async def test_redeliveries_and_dissimilar_candidates_cost_no_request(
    consolidator: Callable[[], Harness], fake: FakeOpenAI
) -> None:
    h = consolidator()
    changes = h.sink("changes")
    far = preference(FAR, "User preference: I prefer aisle seats.", "e4", [0.0, 0.0, 1.0], 3)
    await h.feed([codec.dumps(OLD), codec.dumps(far)], lambda: len(changes.sent) >= 2)
    # OLD was stored before (by id OLD_ID): found again by its content, it keeps that id.
    assert [(c["op"], c["record"]["id"]) for c in await h.changes()] == [
        ("added", OLD_ID),
        ("added", *await memory_ids(h, FAR)),
    ]
    assert fake.requests == []
