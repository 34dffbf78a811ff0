"""The summarizer agent with a configured LLM (the fake server), through Faust's test context."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path

import faust
import orjson
import pytest
from prometheus_client import REGISTRY

from agents.summarizer import agent
from agents.topics import Topics
from schemas import EvictedChunk, TurnEvent
from services.config import Settings
from services.runtime import Runtime
from services.textutil import stable_id
from services.topics import BY_ROLE as TOPIC_NAMES
from tests.agents.test_agents import Harness, Sink
from tests.llm.fake_openai import FakeOpenAI, Reply, answer
from tests.stack import turn

EPISODE = {"summary": "The user booked flights for a June trip to Lisbon.", "topics": ["Lisbon", "travel"]}


@pytest.fixture
async def summarizer(tmp_path: Path, fake: FakeOpenAI) -> AsyncIterator[Callable[[], Harness]]:
    """Only settings matter to this stage: no Postgres, no model."""
    settings = Settings(data_dir=tmp_path, llm_base_url=fake.base_url, llm_timeout=2.0, llm_max_retries=0)
    runtime = Runtime.create(settings)

    def build() -> Harness:
        app = faust.App("test-summarizer-llm", broker="kafka://127.0.0.1:1", store="memory://", web_enabled=False)
        inbound = app.topic(
            TOPIC_NAMES["evicted"], key_type=bytes, value_type=bytes, key_serializer="raw", value_serializer="raw"
        )
        sinks = {attr: Sink(name) for attr, name in TOPIC_NAMES.items() if attr != "evicted"}
        agent.register(app, Topics(evicted=inbound, **sinks), runtime)
        return Harness(app, agent.STAGE, Topics(evicted=inbound, **sinks), runtime)

    yield build
    await runtime.index.close()


def chunk_bytes() -> tuple[EvictedChunk, bytes]:
    turns = [
        TurnEvent.model_validate({**turn("t", "u", "s", i, text), "event_id": f"e{i}"})
        for i, text in enumerate(["We planned the Lisbon trip for June.", "Flights are booked.", "Hotel next."])
    ]
    chunk = EvictedChunk(tenant_id="t", user_id="u", session_id="s", reason="trimmed", turns=turns, cause=["e2"])
    return chunk, orjson.dumps(chunk.model_dump(mode="json"))


def dlq_count(reason: str) -> float:
    return REGISTRY.get_sample_value("memstream_dlq_messages_total", {"stage": "summarizer", "reason": reason}) or 0.0


async def test_the_llm_writes_the_episode(summarizer: Callable[[], Harness], fake: FakeOpenAI) -> None:
    h = summarizer()
    out, dlq = h.sink("candidates"), h.sink("dlq")
    fake.queue(answer(EPISODE))
    _, value = chunk_bytes()
    await h.feed([value], lambda: bool(out.sent))
    (episode,) = out.values()
    assert episode["text"] == EPISODE["summary"]
    assert episode["extractor"] == "llm/v1"
    assert episode["category"] == "lisbon, travel"
    assert episode["entities"] == ["Lisbon", "June"]  # the deterministic entities, not the model's
    assert episode["source"]["event_ids"] == ["e0", "e1", "e2"]
    assert episode["candidate_id"] == stable_id("t", "u", "episode", "e0", "e1", "e2")  # the extractive path's id
    assert dlq.sent == []


async def test_garbage_twice_writes_the_extractive_episode_and_dead_letters_the_output(
    summarizer: Callable[[], Harness], fake: FakeOpenAI
) -> None:
    h = summarizer()
    out, dlq = h.sink("candidates"), h.sink("dlq")
    before = dlq_count("llm_invalid_output")
    fake.queue(Reply(content="I cannot summarize that"), Reply(content='{"summary": "cut o', finish_reason="length"))
    _, value = chunk_bytes()
    await h.feed([value], lambda: bool(out.sent) and bool(dlq.sent))
    (episode,) = out.values()
    assert episode["extractor"] == "extractive/v1"
    assert episode["text"].startswith("Conversation on ")
    assert dlq.reasons() == [b"llm_invalid_output"]
    _, dead_value, headers = dlq.sent[0]
    assert dead_value == value  # the chunk itself, replayable
    assert headers is not None
    error = headers["x-memstream-error"].decode()
    assert "summarize_episode" in error
    assert error.endswith('raw output: {"summary": "cut o')
    assert dlq_count("llm_invalid_output") == before + 1


async def test_an_outage_falls_back_without_dead_lettering(summarizer: Callable[[], Harness], fake: FakeOpenAI) -> None:
    h = summarizer()
    out, dlq = h.sink("candidates"), h.sink("dlq")
    fake.queue(Reply(status=503, content="down"))
    _, value = chunk_bytes()
    await h.feed([value], lambda: bool(out.sent))
    (episode,) = out.values()
    assert episode["extractor"] == "extractive/v1"
    assert dlq.sent == []


async def test_a_chunk_of_greetings_costs_no_request(summarizer: Callable[[], Harness], fake: FakeOpenAI) -> None:
    h = summarizer()
    dlq = h.sink("dlq")
    turns = [TurnEvent.model_validate({**turn("t", "u", "s", 0, "ok"), "event_id": "g0"})]
    chunk = EvictedChunk(tenant_id="t", user_id="u", session_id="s", reason="trimmed", turns=turns, cause=["g0"])
    # The schema violation after it shows the greeting chunk was handled first.
    await h.feed([orjson.dumps(chunk.model_dump(mode="json")), b"{}"], lambda: bool(dlq.sent))
    assert h.sink("candidates").sent == []
    assert fake.requests == []
