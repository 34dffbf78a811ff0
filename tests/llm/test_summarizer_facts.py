"""LLM fact extraction in the summarizer (the optional LLM path): facts with the rule path's ids, a rolling
per-session summary carried from chunk to chunk, a bad answer dead-lettered, and no double fold on redelivery."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from agents.rules.candidates import candidates_for_turn
from schemas import EvictedChunk, MemoryType, TurnEvent
from services.stores.postgres import SessionSummary
from tests.agents.test_agents import Harness
from tests.factories import turn_event
from tests.llm.fake_openai import Reply, answer
from tests.llm.routed_openai import RoutedOpenAI, routed_openai
from tests.llm.summarizer_stage import summarizer_stage

BERLIN = {"kind": "fact", "text": "User lives in Berlin", "category": "location", "key": "city", "value": "Berlin"}
NURSE = {"kind": "fact", "text": "User works as a nurse", "category": "work", "key": "occupation", "value": "nurse"}


@pytest.fixture
def fake() -> Iterator[RoutedOpenAI]:
    with routed_openai() as server:
        yield server


@pytest.fixture
async def summarizer(tmp_path: Path, pg_dsn: str, fake: RoutedOpenAI) -> AsyncIterator[Callable[[], Harness]]:
    async with summarizer_stage(tmp_path, pg_dsn, fake.base_url) as build:
        yield build


def chunk(*turns: TurnEvent) -> tuple[EvictedChunk, bytes]:
    c = EvictedChunk(tenant_id="t", user_id="u", session_id="s", reason="trimmed", turns=list(turns), cause=["x"])
    return c, orjson.dumps(c.model_dump(mode="json"))


FIRST = chunk(turn_event(2, "I live in Berlin"), turn_event(3, "Berlin is lovely in spring, the assistant says."))
SECOND = chunk(turn_event(4, "I work as a nurse"), turn_event(5, "Night shifts must be tiring."))
# As the prompt renders them.
FIRST_TURNS = "[0] user: I live in Berlin\n[1] assistant: Berlin is lovely in spring, the assistant says."
SECOND_TURNS = "[0] user: I work as a nurse\n[1] assistant: Night shifts must be tiring."


def facts(summary: str, *items: dict[str, Any]) -> Reply:
    return answer({"facts": list(items), "summary": summary})


def episode(text: str) -> Reply:
    return answer({"summary": text, "topics": ["work"]})


async def run(build: Callable[[], Harness], value: bytes) -> list[dict[str, Any]]:
    """One delivery of `value` through a fresh app; the candidates it forwarded."""
    h = build()
    out = h.sink("candidates")
    await h.feed([value], lambda: bool(out.sent))
    return out.values()


def rule_fact_id(turn: TurnEvent) -> str:
    return next(c.candidate_id for c in candidates_for_turn(turn) if c.type is MemoryType.FACT)


def prompts(fake: RoutedOpenAI) -> list[str]:
    """The user message of each first-try extract_facts request (repairs repeat it)."""
    return [r["messages"][1]["content"] for r in fake.requests_for("extract_facts") if len(r["messages"]) == 2]


async def stored(h: Harness) -> SessionSummary | None:
    return await h.runtime.summaries.load("t", "u", "s")


async def test_facts_get_the_rule_path_ids_and_the_summary_rolls_to_the_next_chunk(
    summarizer: Callable[[], Harness], fake: RoutedOpenAI
) -> None:
    fake.queue("summarize_episode", episode("The user talked about Berlin."), episode("The user talked about work."))
    assistant_said = {**NURSE, "source_turn": 1}  # the assistant's turn: not the user's fact
    fake.queue("extract_facts", facts("The user lives in Berlin.", {**BERLIN, "source_turn": 0}, assistant_said))
    fake.queue("extract_facts", facts("The user lives in Berlin and works as a nurse.", {**NURSE, "source_turn": 0}))

    first = await run(summarizer, FIRST[1])
    assert [(c["type"], c["extractor"]) for c in first] == [("episode", "llm/v1"), ("fact", "llm/v1")]
    assert first[0]["entities"] == ["Berlin"]  # per turn: not "Berlin Berlin" across the turn boundary
    fact = first[1]
    assert fact["candidate_id"] == rule_fact_id(FIRST[0].turns[0])  # one memory whichever path found it
    assert (fact["category"], fact["key_name"], fact["value"]) == ("location", "city", "Berlin")
    assert fact["source"]["event_ids"] == ["e2"]

    second = await run(summarizer, SECOND[1])
    assert [c["candidate_id"] for c in second if c["type"] == "fact"] == [rule_fact_id(SECOND[0].turns[0])]
    first_prompt, second_prompt = prompts(fake)
    assert first_prompt.startswith("Session summary so far: (none)")
    assert second_prompt.startswith("Session summary so far: The user lives in Berlin.\n")
    state = await stored(summarizer())
    assert state is not None
    assert state.summary == "The user lives in Berlin and works as a nurse."
    assert state.previous_summary == "The user lives in Berlin."
    assert state.mark.through_event_id == "e5"


async def test_a_garbage_answer_is_dead_lettered_and_the_episode_still_written(
    summarizer: Callable[[], Harness], fake: RoutedOpenAI
) -> None:
    fake.queue("summarize_episode", episode("The user talked about Berlin."))
    fake.queue("extract_facts", Reply(content="Sure! Facts: Berlin"), Reply(content='{"facts": [{"kind": "fa'))
    h = summarizer()
    out, dlq = h.sink("candidates"), h.sink("dlq")
    await h.feed([FIRST[1]], lambda: bool(out.sent))
    (only,) = out.values()  # the episode; the turn's fact is the rule path's, stored when the turn arrived
    assert (only["type"], only["extractor"]) == ("episode", "llm/v1")
    assert dlq.reasons() == [b"llm_invalid_output"]
    _, _, headers = dlq.sent[0]
    (dead_value,) = await h.dead_letters()
    assert dead_value == FIRST[1]  # the chunk itself, replayable
    assert headers is not None
    error = headers["x-memstream-error"].decode()
    assert error.startswith("llm extract_facts: invalid_output")
    # The letter is sealed for its user and its header stays in clear: the quoted output's keys are redacted.
    assert "raw output: {" in error
    assert "kind" not in error
    assert await stored(h) is None  # nothing to fold


async def test_redelivery_never_folds_a_chunk_twice(summarizer: Callable[[], Harness], fake: RoutedOpenAI) -> None:
    fake.queue("summarize_episode", *(episode(f"Episode {i}.") for i in range(4)))
    fake.queue(
        "extract_facts",
        facts("S1", {**BERLIN, "source_turn": 0}),
        facts("S1 again", {**BERLIN, "source_turn": 0}),  # the same chunk, redelivered
        facts("S2", {**NURSE, "source_turn": 0}),
        facts("S2 plus the first chunk once more", {**BERLIN, "source_turn": 0}),  # an older chunk, replayed
    )
    once = await run(summarizer, FIRST[1])
    again = await run(summarizer, FIRST[1])
    assert [c["candidate_id"] for c in again] == [c["candidate_id"] for c in once]  # downstream upserts them
    await run(summarizer, SECOND[1])
    await run(summarizer, FIRST[1])

    # What each delivery was folded into: nothing, nothing again (not S1), S1 again, and S2 (read only).
    basis = [("(none)", FIRST_TURNS), ("(none)", FIRST_TURNS), ("S1 again", SECOND_TURNS), ("S2", FIRST_TURNS)]
    assert prompts(fake) == [f"Session summary so far: {s}\n\nNew turns:\n{turns}" for s, turns in basis]
    state = await stored(summarizer())
    assert state is not None
    assert (state.summary, state.previous_summary) == ("S2", "S1 again")  # the replayed older chunk changed nothing
