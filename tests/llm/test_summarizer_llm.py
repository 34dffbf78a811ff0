"""The summarizer agent with a configured LLM (the fake server), through Faust's test context: the episode."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import orjson
import pytest
from prometheus_client import REGISTRY

from schemas import EvictedChunk, TurnEvent
from services.core.textutil import stable_id
from tests.agents.test_agents import Harness
from tests.llm.fake_openai import Reply, answer
from tests.llm.routed_openai import RoutedOpenAI, routed_openai
from tests.llm.summarizer_stage import summarizer_stage
from tests.stack import turn

EPISODE = {"summary": "The user booked flights for a June trip to Lisbon.", "topics": ["Lisbon", "travel"]}


@pytest.fixture
def fake() -> Iterator[RoutedOpenAI]:
    """Scripted per operation: the stage also asks extract_facts (unscripted here: a 500, so it falls back)."""
    with routed_openai() as server:
        yield server


@pytest.fixture
async def summarizer(tmp_path: Path, pg_dsn: str, fake: RoutedOpenAI) -> AsyncIterator[Callable[[], Harness]]:
    async with summarizer_stage(tmp_path, pg_dsn, fake.base_url) as build:
        yield build


def chunk_bytes() -> tuple[EvictedChunk, bytes]:
    turns = [
        TurnEvent.model_validate({**turn("t", "u", "s", i, text), "event_id": f"e{i}"})
        for i, text in enumerate(["We planned the Lisbon trip for June.", "Flights are booked.", "Hotel next."])
    ]
    chunk = EvictedChunk(tenant_id="t", user_id="u", session_id="s", reason="trimmed", turns=turns, cause=["e2"])
    return chunk, orjson.dumps(chunk.model_dump(mode="json"))


def dlq_count(reason: str) -> float:
    return REGISTRY.get_sample_value("memstream_dlq_messages_total", {"stage": "summarizer", "reason": reason}) or 0.0


async def test_the_llm_writes_the_episode(summarizer: Callable[[], Harness], fake: RoutedOpenAI) -> None:
    h = summarizer()
    out, dlq = h.sink("candidates"), h.sink("dlq")
    fake.queue("summarize_episode", answer(EPISODE))
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
    summarizer: Callable[[], Harness], fake: RoutedOpenAI
) -> None:
    h = summarizer()
    out, dlq = h.sink("candidates"), h.sink("dlq")
    before = dlq_count("llm_invalid_output")
    fake.queue(
        "summarize_episode",
        Reply(content="I cannot summarize that"),
        Reply(content='{"summary": "cut o', finish_reason="length"),
    )
    _, value = chunk_bytes()
    await h.feed([value], lambda: bool(out.sent) and bool(dlq.sent))
    (episode,) = out.values()
    assert episode["extractor"] == "extractive/v1"
    assert episode["text"].startswith("Conversation on ")
    assert dlq.reasons() == [b"llm_invalid_output"]
    _, _, headers = dlq.sent[0]
    (dead_value,) = await h.dead_letters()
    assert dead_value == value  # the chunk itself, replayable
    assert headers is not None
    error = headers["x-memstream-error"].decode()
    assert "summarize_episode" in error
    # The letter is sealed for its user and its header stays in clear: the quoted output's keys are redacted.
    assert "raw output: {" in error
    assert "summary" not in error.split("raw output:")[1]
    assert dlq_count("llm_invalid_output") == before + 1


async def test_an_outage_falls_back_without_dead_lettering(
    summarizer: Callable[[], Harness], fake: RoutedOpenAI
) -> None:
    h = summarizer()
    out, dlq = h.sink("candidates"), h.sink("dlq")
    fake.queue("summarize_episode", Reply(status=503, content="down"))
    _, value = chunk_bytes()
    await h.feed([value], lambda: bool(out.sent))
    (episode,) = out.values()
    assert episode["extractor"] == "extractive/v1"
    assert dlq.sent == []


async def test_a_chunk_of_greetings_costs_no_request(summarizer: Callable[[], Harness], fake: RoutedOpenAI) -> None:
    h = summarizer()
    dlq = h.sink("dlq")
    turns = [TurnEvent.model_validate({**turn("t", "u", "s", 0, "ok"), "event_id": "g0"})]
    chunk = EvictedChunk(tenant_id="t", user_id="u", session_id="s", reason="trimmed", turns=turns, cause=["g0"])
    # The schema violation after it shows the greeting chunk was handled first.
    await h.feed([orjson.dumps(chunk.model_dump(mode="json")), b"{}"], lambda: bool(dlq.sent))
    assert h.sink("candidates").sent == []
    assert fake.requests == []
