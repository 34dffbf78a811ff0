"""Agents through Faust's test context: real agent code, real model and Qdrant engine, no broker.

Outbound topics are recording sinks, so each test sees exactly what an agent
would have produced, keyed, and what it sent to the DLQ with which reason.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import faust
import orjson
import pytest
from prometheus_client import REGISTRY

from agents.topics import Topics
from schemas import (
    ChangeOp,
    EvictedChunk,
    MemoryCandidate,
    MemoryChange,
    MemoryRecord,
    MemoryStatus,
    MemoryType,
    TurnEvent,
)
from services.archive.changes import seal_change
from services.archive.dlq import open_entries as dead_letter_entries
from services.core import backlog
from services.core.config import Settings
from services.core.textutil import stable_id
from services.core.topics import BY_ROLE as TOPIC_NAMES
from services.kafka.dead_letters import REASON_HEADER
from services.runtime import Runtime
from services.stores.postgres import migrate
from services.stores.vector import Scope
from tests.changes import opened
from tests.factories import exchange_candidate
from tests.index_probe import search
from tests.stack import session_end, turn

NOW = datetime(2026, 5, 1, tzinfo=UTC)


@dataclass
class Sink:
    """Stands in for an outbound Kafka topic and records every send."""

    name: str
    sent: list[tuple[bytes, bytes, dict[str, bytes] | None]] = field(default_factory=list)

    async def send(self, *, key: bytes, value: bytes, headers: dict[str, bytes] | None = None) -> asyncio.Future[None]:
        self.sent.append((key, value, headers))
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done

    def get_topic_name(self) -> str:
        return self.name

    def values(self) -> list[dict[str, Any]]:
        return [orjson.loads(v) for _, v, _ in self.sent]

    def reasons(self) -> list[bytes]:
        return [h[REASON_HEADER] for _, _, h in self.sent if h]


@dataclass
class Harness:
    app: faust.App
    stage: str
    topics: Topics
    runtime: Runtime

    def sink(self, attr: str) -> Sink:
        sink: Sink = getattr(self.topics, attr)
        return sink

    async def changes(self) -> list[dict[str, Any]]:
        """What the agent published on memory.changes, opened with the users' keys as subscribers open it."""
        return await opened(self.runtime.keys, [value for _, value, _ in self.sink("changes").sent])

    async def dead_letters(self) -> list[bytes | None]:
        """What the agent put on memory.dlq, each value opened with its user's key as the operator's reader opens it."""
        sent = self.sink("dlq").sent
        return [
            entry.value for entry in await dead_letter_entries(self.runtime.keys, [(v, h or {}) for _, v, h in sent])
        ]

    async def sealed(self, change: MemoryChange) -> bytes:
        """`change` as a memory.changes message, sealed with its user's key (made if they have none)."""
        return seal_change(await self.runtime.keys.get_or_create(change.tenant_id, change.user_id), change)

    async def feed(self, values: list[bytes], until: Callable[[], bool | Awaitable[bool]]) -> None:
        """Put raw values on the agent's input topic; return once `until()` holds (it may be a coroutine)."""
        async with self.app.agents[self.stage].test_context() as agent:
            for value in values:
                await agent.put(value, key=b"t:u", wait=False)
            for _ in range(500):
                done = until()
                if await done if inspect.isawaitable(done) else done:
                    return
                await asyncio.sleep(0.02)
        raise AssertionError(f"{self.stage} never produced the expected output")


@pytest.fixture
async def harness(tmp_path: Path, pg_dsn: str) -> AsyncIterator[Callable[[Any, str], Harness]]:
    settings = Settings(data_dir=tmp_path, pg_dsn=pg_dsn, embed_batch_within=0.01, consolidate_batch_within=0.01)
    runtime = Runtime.create(settings)
    await migrate(pg_dsn)
    await runtime.pg.open()

    def build(stage_module: Any, source: str) -> Harness:
        app = faust.App(
            f"test-{stage_module.STAGE}", broker="kafka://127.0.0.1:1", store="memory://", web_enabled=False
        )
        inbound = app.topic(
            TOPIC_NAMES[source], key_type=bytes, value_type=bytes, key_serializer="raw", value_serializer="raw"
        )
        sinks = {attr: Sink(name) for attr, name in TOPIC_NAMES.items() if attr != source}
        topics = Topics(**{source: inbound}, **sinks)
        stage_module.register(app, topics, runtime)
        return Harness(app, stage_module.STAGE, topics, runtime)

    yield build
    await runtime.index.close()
    await runtime.pg.close()


async def test_window_agent_extracts_once_per_accepted_turn_and_closes_a_session_once(
    harness: Callable[[Any, str], Harness],
) -> None:
    from agents.window import agent

    h = harness(agent, "turns")
    candidates, evicted, dlq = h.sink("candidates"), h.sink("evicted"), h.sink("dlq")
    said = turn("t", "u", "s", 0, "I love green tea and I live in Berlin.")
    assistant = turn("t", "u", "s", 1, "Noted, I love that too.", role="assistant")
    conflicting = {**said, "content": "I live in Paris."}  # a known event id, other content
    end = session_end("t", "u", "s")
    values = [orjson.dumps(e) for e in (assistant, said, said, conflicting, end, end)]
    await h.feed([values[0], b"{broken", *values[1:]], lambda: len(dlq.sent) >= 2 and bool(evicted.sent))
    texts = {c["text"]: c["type"] for c in candidates.values()}
    assert texts == {
        "User lives in Berlin": "fact",
        "User preference: I love green tea": "preference",  # the city is the fact, not part of the like
        "I love green tea and I live in Berlin.": "exchange",
    }
    assert len(candidates.sent) == 3  # the redelivered turn added nothing
    assert {key for key, _, _ in candidates.sent} == {b"t:u"}
    assert dlq.reasons() == [b"invalid_json", b"conflicting_duplicate"]
    (chunk,) = evicted.values()  # the second session_end changed nothing
    assert chunk["reason"] == "session_end"
    assert [t["event_id"] for t in chunk["turns"]] == [said["event_id"], assistant["event_id"]]
    async with h.runtime.pg.connection("test") as conn:
        left = await (await conn.execute("SELECT count(*) AS n FROM outbox")).fetchone()
    assert left == {"n": 0}  # everything sent was confirmed and forgotten


async def test_summarizer_agent_writes_an_episode_and_dead_letters_a_bad_chunk(
    harness: Callable[[Any, str], Harness],
) -> None:
    from agents.summarizer import agent

    h = harness(agent, "evicted")
    turns = [
        TurnEvent.model_validate({**turn("t", "u", "s", i, text), "event_id": f"e{i}"})
        for i, text in enumerate(["We planned the Lisbon trip for June.", "Flights are booked.", "Hotel next."])
    ]
    chunk = EvictedChunk(tenant_id="t", user_id="u", session_id="s", reason="trimmed", turns=turns, cause=["e2"])
    out, dlq = h.sink("candidates"), h.sink("dlq")
    await h.feed(
        [b'{"tenant_id": "t"}', orjson.dumps(chunk.model_dump(mode="json"))],
        lambda: bool(out.sent) and bool(dlq.sent),
    )
    (episode,) = out.values()
    assert episode["type"] == "episode"
    assert episode["source"]["event_ids"] == [t.event_id for t in turns]
    assert backlog.is_background(out.sent[0][2])  # derived work: the embedder takes it after fresh candidates
    assert dlq.reasons() == [b"schema_violation"]


def _candidate(text: str, user: str = "u") -> MemoryCandidate:
    return exchange_candidate(text, user, NOW)


async def test_embedder_agent_embeds_a_batch_with_the_real_model(harness: Callable[[Any, str], Harness]) -> None:
    from agents.embedder import agent

    h = harness(agent, "candidates")
    out = h.sink("embedded")
    texts = ["I walk the dog at seven.", "Berlin is cold in winter.", "Tea, not coffee."]
    values = [orjson.dumps(_candidate(t).model_dump(mode="json")) for t in texts]
    await h.feed(values, lambda: len(out.sent) == 3)
    embedded = out.values()
    assert [e["candidate"]["text"] for e in embedded] == texts
    assert {len(e["vector"]) for e in embedded} == {384}
    assert all(abs(sum(x * x for x in e["vector"]) - 1.0) < 1e-3 for e in embedded)


async def test_embedder_agent_embeds_what_users_just_said_before_derived_work_and_acknowledges_all(
    harness: Callable[[Any, str], Harness],
) -> None:
    from agents.embedder import agent

    h = harness(agent, "candidates")
    out = h.sink("embedded")
    episodes = [_candidate(f"Episode {i}: a long afternoon planning the Lisbon trip.", f"idle-{i}") for i in range(12)]
    fresh = [_candidate(f"Fresh turn {i} about the dentist.", "active") for i in range(3)]
    behind = _candidate("A new turn of a user whose episode is still queued.", "idle-0")
    sent = []
    async with h.app.agents[h.stage].test_context() as tc:
        for c in episodes:
            value = orjson.dumps(c.model_dump(mode="json"))
            sent.append(await tc.put(value, key=c.key, headers=[backlog.BACKGROUND], wait=False))
        for c in (*fresh, behind):
            sent.append(await tc.put(orjson.dumps(c.model_dump(mode="json")), key=c.key, wait=False))
        for _ in range(500):
            if len(out.sent) >= len(sent) and all(e.message.acked for e in sent):
                break
            await asyncio.sleep(0.02)
    order = [e["candidate"]["text"] for e in out.values()]
    assert sorted(order) == sorted(c.text for c in (*episodes, *fresh, behind))  # each once
    assert all(e.message.acked for e in sent)  # derived work too, once forwarded
    assert order.index(behind.text) > order.index(episodes[0].text)  # a user's order holds
    assert max(order.index(c.text) for c in fresh) < max(order.index(c.text) for c in episodes)


def _change(text: str, vector: list[float], user: str = "u") -> MemoryChange:
    candidate = _candidate(text)
    record = MemoryRecord(
        id=candidate.candidate_id,
        tenant_id="t",
        user_id=user,
        type=MemoryType.EXCHANGE,
        text=text,
        content_hash=stable_id("hash", text),
        importance=0.3,
        confidence=1.0,
        status=MemoryStatus.ACTIVE,
        observed_at=NOW,
        created_at=NOW,
        updated_at=NOW,
        source=candidate.source,
    )
    return MemoryChange(
        tenant_id="t",
        user_id=user,
        op=ChangeOp.ADDED,
        record=record,
        vector=vector,
        cause=candidate.source.event_ids,
        committed_at=NOW,
    )


async def test_qdrant_sink_indexes_good_changes_and_dead_letters_a_poison_one(
    harness: Callable[[Any, str], Harness],
) -> None:
    from agents.qdrant_sink import agent

    h = harness(agent, "changes")
    await h.runtime.index.ensure(4)
    dlq = h.sink("dlq")
    good = [_change("green tea in the morning", [1.0, 0.0, 0.0, 0.0]), _change("dog walks", [0.0, 1.0, 0.0, 0.0])]
    poison = _change("wrong dimension", [1.0, 0.0])  # the index refuses it
    # Poison last: the batch fails, is retried item by item, and the DLQ send comes after both good ones.
    await h.feed([await h.sealed(c) for c in (*good, poison)], lambda: bool(dlq.sent))
    hits = await search(h.runtime.index, Scope("t", "u"), [1.0, 0.0, 0.0, 0.0], h.runtime.bm25.query("tea"), 10)
    assert {hit.payload["text"] for hit in hits} == {"green tea in the morning", "dog walks"}
    assert dlq.reasons() == [b"store_rejected"]  # the engine refuses it: bad data, not an outage
    # The dead letter is the message as it came, sealed again for its user: no text in clear either.
    _, value, headers = dlq.sent[0]
    assert b"wrong dimension" not in value
    (letter,) = await dead_letter_entries(h.runtime.keys, [(value, headers or {})])
    assert [c["record"]["text"] for c in await opened(h.runtime.keys, [letter.value])] == ["wrong dimension"]


def skipped(reason: str) -> float:
    return REGISTRY.get_sample_value("memstream_changes_skipped_total", {"stage": "qdrant_sink", "reason": reason}) or 0


async def test_qdrant_sink_skips_and_counts_a_forgotten_users_changes_and_dead_letters_only_malformed_values(
    harness: Callable[[Any, str], Harness],
) -> None:
    from agents.qdrant_sink import agent

    h = harness(agent, "changes")
    await h.runtime.index.ensure(4)
    dlq = h.sink("dlq")
    kept = await h.sealed(_change("green tea in the morning", [1.0, 0.0, 0.0, 0.0]))
    theirs = await h.sealed(_change("a forgotten user's secret", [0.0, 1.0, 0.0, 0.0], user="gone"))
    async with h.runtime.pg.transaction("forget") as conn:
        assert await h.runtime.keys.forget(conn, "t", "gone")  # what forgetting the user does to their key
    moved = orjson.loads(await h.sealed(_change("dog walks", [0.0, 0.0, 1.0, 0.0])))
    tampered = orjson.dumps({**moved, "version": moved["version"] + 1})  # a clear field edited: does not open
    before = {reason: skipped(reason) for reason in ("forgotten", "unreadable")}

    async def settled() -> bool:
        return bool(dlq.sent) and skipped("unreadable") > before["unreadable"] and await indexed() == 1

    async def indexed() -> int:
        return await h.runtime.index.count_scope("t", "u")

    await h.feed([theirs, b"{broken", tampered, kept], settled)

    assert {reason: skipped(reason) - before[reason] for reason in before} == {"forgotten": 1, "unreadable": 1}
    assert dlq.reasons() == [b"schema_violation"]  # the value that is no message at all, and only it
    assert await h.runtime.index.count_scope("t", "gone") == 0
    hits = await search(h.runtime.index, Scope("t", "u"), [1.0, 0.0, 0.0, 0.0], h.runtime.bm25.query("tea"), 10)
    assert [hit.payload["text"] for hit in hits] == ["green tea in the morning"]


async def test_window_agent_trims_each_session_at_its_own_jittered_limit(
    harness: Callable[[Any, str], Harness],
) -> None:
    from agents.window import agent

    h = harness(agent, "turns")
    evicted, candidates = h.sink("evicted"), h.sink("candidates")
    limits = agent.window_limits(h.runtime.settings)
    assert limits.jitter > 0  # the default jitters
    by_limit: dict[int, str] = {}
    for i in range(200):
        by_limit.setdefault(limits.for_session("t", "u", f"s{i}").max_turns, f"s{i}")
    low, high = by_limit[min(by_limit)], by_limit[max(by_limit)]
    assert min(by_limit) < max(by_limit) == limits.max_turns
    # Both sessions get one turn more than the lower limit: only the session with that limit trims.
    count = min(by_limit) + 1
    events = [turn("t", "u", s, i, f"Turn {i} of {s}.") for s in (low, high) for i in range(count)]
    last = f"Turn {count - 1} of {high}."
    await h.feed([orjson.dumps(e) for e in events], lambda: any(c["text"] == last for c in candidates.values()))
    (chunk,) = evicted.values()
    assert (chunk["session_id"], chunk["reason"]) == (low, "trimmed")
    # As many turns evicted as a trim at the full limits takes: the oldest after the first.
    taken = limits.max_turns + 1 - limits.targets()[1]
    assert [t["turn_index"] for t in chunk["turns"]] == list(range(1, 1 + taken))


async def test_window_agent_gives_each_exchange_the_turns_before_it_as_context(
    harness: Callable[[Any, str], Harness],
) -> None:
    from agents.window import agent

    h = harness(agent, "turns")
    candidates = h.sink("candidates")
    said = [
        turn("t", "u", "s", 0, "Did you go to the concert?", role="assistant"),
        turn("t", "u", "s", 1, "Yes, on Friday."),
        turn("t", "u", "s", 2, "How was it?", role="assistant"),
        turn("t", "u", "s", 3, "Loud and wonderful."),
    ]
    end = session_end("t", "u", "s")
    after = turn("t", "u", "s", 4, "Back again.")
    events = [*said, end, after]
    await h.feed([orjson.dumps(e) for e in events], lambda: len(candidates.sent) >= 3)
    contexts = {c["text"]: c["context"] for c in candidates.values() if c["type"] == "exchange"}
    assert contexts == {
        "Yes, on Friday.": ["Did you go to the concert?"],
        "Loud and wonderful.": ["Yes, on Friday.", "How was it?"],
        "Back again.": [],  # the session was closed: it reopens with an empty window
    }


async def test_embedder_agent_embeds_the_context_window_of_an_exchange_in_the_same_batch(
    harness: Callable[[Any, str], Harness],
) -> None:
    from agents.embedder import agent

    h = harness(agent, "candidates")
    out = h.sink("embedded")
    plain = _candidate("Tea, not coffee.")
    answer = _candidate("Yes, on Friday.").model_copy(update={"context": ["Hi!", "Did you go to the concert?"]})
    await h.feed([orjson.dumps(c.model_dump(mode="json")) for c in (answer, plain)], lambda: len(out.sent) == 2)
    by_text = {e["candidate"]["text"]: e for e in out.values()}
    model = await h.runtime.embedder()
    expected = model.embed(["Did you go to the concert?\nYes, on Friday."])[0]
    assert by_text["Yes, on Friday."]["context_vector"] == pytest.approx(expected, abs=1e-5)
    assert by_text["Yes, on Friday."]["vector"] == pytest.approx(model.embed(["Yes, on Friday."])[0], abs=1e-5)
    assert by_text["Tea, not coffee."]["context_vector"] is None


async def test_qdrant_sink_indexes_the_context_legs_and_a_later_change_keeps_the_dense_one(
    harness: Callable[[Any, str], Harness],
) -> None:
    from agents.qdrant_sink import agent

    h = harness(agent, "changes")
    await h.runtime.index.ensure(4)
    first = _change("Yes, on Friday.", [1.0, 0.0, 0.0, 0.0])
    with_context = first.model_copy(
        update={
            "record": first.record.model_copy(update={"context": ["Did you go to the concert?"]}),
            "context_vector": [0.0, 1.0, 0.0, 0.0],
        }
    )
    # Maintenance decays it later: the change carries the record and its vector, not the context vector.
    decayed = with_context.model_copy(
        update={
            "op": ChangeOp.UPDATED,
            "record": with_context.record.model_copy(update={"importance": 0.2, "version": 2}),
            "context_vector": None,
        }
    )
    plain = _change("green tea in the morning", [0.0, 0.0, 1.0, 0.0])
    index = h.runtime.index

    async def versions() -> dict[str, int]:
        return await index.versions("t", "u", [with_context.record.id, plain.record.id])

    await h.feed([await h.sealed(c) for c in (with_context, plain)], lambda: _awaited(versions(), 2))
    await h.feed([await h.sealed(decayed)], lambda: _version_is(versions(), with_context.record.id, 2))
    legs = await index.legs(Scope("t", "u"), [0.0, 1.0, 0.0, 0.0], h.runtime.bm25.query("concert"), 10)
    assert [hit.id for hit in legs.dense_ctx] == [with_context.record.id]
    assert legs.dense_ctx[0].score == pytest.approx(1.0)
    assert [hit.id for hit in legs.sparse_ctx] == [with_context.record.id]  # the context's words, not the turn's
    assert legs.sparse == []
    payload = (await index.payloads("t", "u", [with_context.record.id]))[with_context.record.id]
    assert payload["importance"] == 0.2
    assert payload["has_context"] is True


async def _awaited(found: Awaitable[dict[str, int]], n: int) -> bool:
    return len(await found) == n


async def _version_is(found: Awaitable[dict[str, int]], record_id: str, version: int) -> bool:
    return (await found).get(record_id) == version


async def test_consolidator_agent_gives_a_memory_an_id_only_its_users_key_derives(
    harness: Callable[[Any, str], Harness],
) -> None:
    """The id on memory.changes is the candidate's under the user's key: no dictionary over content finds it."""
    from agents.consolidator import agent
    from schemas import EmbeddedCandidate

    h = harness(agent, "embedded")
    vector = [1.0] + [0.0] * 383
    values = [
        orjson.dumps(
            EmbeddedCandidate(
                tenant_id="t", user_id="u", candidate=_candidate(t), vector=vector, model="test"
            ).model_dump(mode="json")
        )
        for t in ("I live in Lisbon.", "I live in Lisbon.")  # the second is the first again: reinforced, one id
    ]
    out = h.sink("changes")
    await h.feed(values[:1], lambda: len(out.sent) >= 1)
    key = await h.runtime.keys.get_or_create("t", "u")
    (added,) = [c for c in await h.changes() if c["op"] == ChangeOp.ADDED.value]
    memory_id = added["record"]["id"]
    assert memory_id == key.memory_id(stable_id("I live in Lisbon."))
    assert memory_id != stable_id("I live in Lisbon.")
    assert [v["memory_id"] for v in out.values()] == [memory_id]  # what travels in clear
    await h.feed(values[1:], lambda: len(out.sent) >= 2)
    assert {v["memory_id"] for v in out.values()} == {memory_id}


async def test_a_stage_reports_how_long_its_batch_waited_so_recall_can_give_way(
    harness: Callable[[Any, str], Harness],
) -> None:
    from agents.window import agent

    h = harness(agent, "turns")
    backlog.STAGES.clear()
    said = orjson.dumps(turn("t", "u", "s-late", 0, "I moved to Lisbon last week."))
    async with h.app.agents[h.stage].test_context() as ctx:
        await ctx.put(said, key=b"t:u", timestamp=time.time() - 3.0, wait=False)  # produced 3 s ago
        for _ in range(250):
            if h.sink("candidates").sent:
                break
            await asyncio.sleep(0.02)
    assert h.sink("candidates").sent
    assert backlog.STAGES.behind(over=2.5, within=10.0)  # the window stage saw a 3 s wait
    assert not backlog.STAGES.behind(over=10.0, within=10.0)
    backlog.STAGES.clear()


async def test_recall_access_marks_never_read_as_ingest_falling_behind(
    harness: Callable[[Any, str], Harness],
) -> None:
    """Marks land in one burst per window: counted, they paced recall to the gate's longest wait under load."""
    from agents.consolidator import commands
    from schemas import dumps
    from schemas.commands import AccessCommand

    h = harness(commands, "commands")
    now = datetime.now(UTC)
    for n, (headers, counts) in enumerate((([backlog.READ_SIDE], False), ([], True))):
        backlog.STAGES.clear()
        mark = AccessCommand(
            command_id=stable_id("mark", str(n)),
            tenant_id="t",
            user_id="u",
            memory_ids=[stable_id("m")],
            counts=[1],
            last_accessed=[now],
            at=now,
        )
        async with h.app.agents[h.stage].test_context() as ctx:
            await ctx.put(dumps(mark), key=b"t:u", timestamp=time.time() - 3.0, headers=headers, wait=False)
            for _ in range(250):
                if backlog.STAGES.behind(over=-1.0, within=10.0):  # the stage has started the batch
                    break
                await asyncio.sleep(0.02)
        assert backlog.STAGES.behind(over=-1.0, within=10.0)
        assert backlog.STAGES.behind(over=2.5, within=10.0) is counts, headers
    backlog.STAGES.clear()
