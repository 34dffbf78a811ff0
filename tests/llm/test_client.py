"""The LLM client and operations against a real HTTP server speaking the OpenAI wire format."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime

from prometheus_client import REGISTRY

from agents.rules.candidates import candidates_for_turn
from schemas import MemoryCandidate, MemoryRecord, MemoryStatus, MemoryType, Provenance
from services.core.textutil import stable_id
from services.llm import Action, Fallback, LlmClient, Ok, decide, extract_facts, fact_candidates, synthesize
from services.llm.client import backoff, parse_answer, strip_fence
from services.llm.operations import EpisodeAnswer, summarize_episode
from tests.factories import turn_event
from tests.llm.fake_openai import FakeOpenAI, Reply, answer

NOW = datetime(2026, 5, 1, tzinfo=UTC)
EPISODE = {"summary": "The user planned a June trip to Lisbon.", "topics": ["lisbon", "travel"], "open_questions": []}


def client(fake: FakeOpenAI, *, timeout: float = 2.0, retries: int = 2, concurrency: int = 4) -> LlmClient:
    return LlmClient(
        base_url=fake.base_url,
        model="fake-model",
        api_key="k",
        timeout=timeout,
        concurrency=concurrency,
        max_retries=retries,
        first_backoff=0.01,
        max_backoff=0.05,
    )


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def outcomes(operation: str, result: str) -> float:
    return sample("memstream_llm_outcomes_total", operation=operation, result=result)


TURNS = [turn_event(0, "We planned the Lisbon trip for June."), turn_event(1, "Lovely, June is warm there.")]


# --- pure pieces -----------------------------------------------------------------------------------------------------


def test_backoff_doubles_to_the_cap_and_honours_a_shorter_retry_after() -> None:
    assert [backoff(a, 0.5, 3.0) for a in range(4)] == [0.5, 1.0, 2.0, 3.0]
    assert backoff(0, 0.5, 3.0, retry_after=0.1) == 0.1
    assert backoff(0, 0.5, 3.0, retry_after=60) == 3.0


def test_a_fenced_answer_parses_and_a_truncated_one_says_so() -> None:
    assert strip_fence('```json\n{"text": "x"}\n```') == '{"text": "x"}'
    parsed = parse_answer('```json\n{"summary": "s"}\n```', EpisodeAnswer, None, truncated=False)
    assert isinstance(parsed, EpisodeAnswer)
    assert parsed.summary == "s"
    error = parse_answer('{"summary": "The user pl', EpisodeAnswer, None, truncated=True)
    assert isinstance(error, str)
    assert "truncated" in error


# --- the wire ----------------------------------------------------------------------------------------------------------


async def test_a_valid_answer_is_ok_in_json_mode_and_counts_latency_and_tokens(fake: FakeOpenAI) -> None:
    before_ok = outcomes("summarize_episode", "ok")
    before_tokens = sample("memstream_llm_tokens_total", operation="summarize_episode", kind="completion")
    before_latency = sample("memstream_llm_request_seconds_count", operation="summarize_episode")
    fake.queue(answer(EPISODE))
    outcome = await summarize_episode(client(fake), TURNS)
    assert outcome == Ok(EpisodeAnswer.model_validate(EPISODE))
    (request,) = fake.requests
    assert request["response_format"] == {"type": "json_object"}
    assert request["model"] == "fake-model"
    assert "[0] user: We planned the Lisbon trip for June." in request["messages"][1]["content"]
    assert "JSON Schema" in request["messages"][0]["content"]
    assert outcomes("summarize_episode", "ok") == before_ok + 1
    after_tokens = sample("memstream_llm_tokens_total", operation="summarize_episode", kind="completion")
    assert after_tokens == before_tokens + 7
    assert sample("memstream_llm_request_seconds_count", operation="summarize_episode") == before_latency + 1


async def test_garbage_then_a_valid_answer_after_one_repair(fake: FakeOpenAI) -> None:
    before = outcomes("summarize_episode", "repaired")
    fake.queue(Reply(content="Sure! Here is the summary: the user likes Lisbon"), answer(EPISODE))
    outcome = await summarize_episode(client(fake), TURNS)
    assert isinstance(outcome, Ok)
    assert outcome.repaired
    assert outcome.value.summary == EPISODE["summary"]
    repair = fake.requests[1]["messages"]
    assert repair[-2] == {"role": "assistant", "content": "Sure! Here is the summary: the user likes Lisbon"}
    assert repair[-1]["role"] == "user"
    assert "not valid JSON" in repair[-1]["content"]
    assert outcomes("summarize_episode", "repaired") == before + 1


async def test_garbage_twice_falls_back_with_the_raw_output(fake: FakeOpenAI) -> None:
    before = outcomes("summarize_episode", "invalid_output")
    fake.queue(Reply(content="no json here"), Reply(content='{"topics": ["still no summary"]}'))
    outcome = await summarize_episode(client(fake), TURNS)
    assert isinstance(outcome, Fallback)
    assert (outcome.reason, outcome.dead_letter) == ("invalid_output", True)
    assert outcome.raw_output == '{"topics": ["still no summary"]}'
    assert "summary" in outcome.error
    assert outcome.describe("summarize_episode").endswith('raw output: {"topics": ["still no summary"]}')
    assert len(fake.requests) == 2  # one repair, never more
    assert outcomes("summarize_episode", "invalid_output") == before + 1


async def test_truncated_json_gets_the_truncation_named_in_the_repair(fake: FakeOpenAI) -> None:
    fake.queue(Reply(content='{"summary": "The user planned a June tr', finish_reason="length"), answer(EPISODE))
    outcome = await summarize_episode(client(fake), TURNS)
    assert isinstance(outcome, Ok)
    assert outcome.repaired
    assert "truncated" in fake.requests[1]["messages"][-1]["content"]


async def test_429_is_retried_then_ok(fake: FakeOpenAI) -> None:
    before = sample("memstream_llm_retries_total", operation="summarize_episode", cause="rate_limited")
    fake.queue(Reply(status=429, content="slow down", headers={"retry-after": "0"}), answer(EPISODE))
    outcome = await summarize_episode(client(fake), TURNS)
    assert isinstance(outcome, Ok)
    assert not outcome.repaired
    assert len(fake.requests) == 2
    assert sample("memstream_llm_retries_total", operation="summarize_episode", cause="rate_limited") == before + 1


async def test_5xx_past_the_retries_falls_back_without_dead_lettering(fake: FakeOpenAI) -> None:
    before = outcomes("synthesize", "server_error")
    fake.queue(*[Reply(status=500, content="boom")] * 3)
    outcome = await synthesize(client(fake, retries=2), "coffee", ["User likes dark roast."])
    assert isinstance(outcome, Fallback)
    assert (outcome.reason, outcome.dead_letter, outcome.raw_output) == ("server_error", False, None)
    assert len(fake.requests) == 3  # the first try and two retries
    assert outcomes("synthesize", "server_error") == before + 1


async def test_a_timeout_is_retried_then_falls_back(fake: FakeOpenAI) -> None:
    before = outcomes("summarize_episode", "timeout")
    fake.queue(*[Reply(content="{}", delay=1.0)] * 2)
    started = time.perf_counter()
    outcome = await summarize_episode(client(fake, timeout=0.2, retries=1), TURNS)
    elapsed = time.perf_counter() - started
    assert isinstance(outcome, Fallback)
    assert (outcome.reason, outcome.dead_letter) == ("timeout", False)
    assert len(fake.requests) == 2
    assert elapsed < 0.9  # two 0.2 s timeouts and a short backoff, not the server's 1 s sleeps
    assert outcomes("summarize_episode", "timeout") == before + 1


async def test_a_4xx_other_than_429_is_not_retried(fake: FakeOpenAI) -> None:
    fake.queue(Reply(status=400, content="context too long"))
    outcome = await summarize_episode(client(fake), TURNS)
    assert isinstance(outcome, Fallback)
    assert outcome.reason == "client_error"
    assert len(fake.requests) == 1


async def test_a_closed_port_is_unavailable(fake: FakeOpenAI) -> None:
    llm = LlmClient(
        base_url="http://127.0.0.1:9/v1", model="m", api_key="k", timeout=1, concurrency=1, max_retries=1,
        first_backoff=0.01,
    )  # fmt: skip
    outcome = await summarize_episode(llm, TURNS)
    assert isinstance(outcome, Fallback)
    assert outcome.reason == "unavailable"


async def test_concurrency_is_bounded_by_the_semaphore(fake: FakeOpenAI) -> None:
    fake.queue(*[Reply(content='{"text": "t"}', delay=0.15)] * 3)
    llm = client(fake, concurrency=1)
    started = time.perf_counter()
    results = await asyncio.gather(*(synthesize(llm, "x", ["m"]) for _ in range(3)))
    assert results == [Ok("t")] * 3
    assert time.perf_counter() - started >= 0.45  # one at a time


# --- operations ----------------------------------------------------------------------------------------------------------


def _record(text: str) -> MemoryRecord:
    return MemoryRecord(
        id=stable_id("record", text),
        tenant_id="t",
        user_id="u",
        type=MemoryType.FACT,
        text=text,
        content_hash=stable_id("hash", text),
        importance=0.8,
        confidence=0.9,
        status=MemoryStatus.ACTIVE,
        observed_at=NOW,
        created_at=NOW,
        updated_at=NOW,
        source=Provenance(session_id="s", event_ids=["e0"]),
    )


CANDIDATE = MemoryCandidate(
    candidate_id=stable_id("candidate"),
    tenant_id="t",
    user_id="u",
    type=MemoryType.FACT,
    text="User lives in Lisbon",
    importance=0.85,
    confidence=0.9,
    observed_at=NOW,
    source=Provenance(session_id="s", event_ids=["e5"]),
    extractor="rules/v1",
)


async def test_decide_update_names_a_neighbour(fake: FakeOpenAI) -> None:
    berlin, tea = _record("User lives in Berlin"), _record("User likes green tea")
    fake.queue(answer({"action": "UPDATE", "target_id": berlin.id, "reason": "moved"}))
    outcome = await decide(client(fake), CANDIDATE, [berlin, tea])
    assert isinstance(outcome, Ok)
    assert (outcome.value.action, outcome.value.target_id) == (Action.UPDATE, berlin.id)
    assert f"id={berlin.id}" in fake.requests[0]["messages"][1]["content"]


async def test_decide_with_an_unknown_target_falls_back(fake: FakeOpenAI) -> None:
    berlin = _record("User lives in Berlin")
    invented = stable_id("nobody showed the model this")
    fake.queue(*[answer({"action": "DELETE", "target_id": invented})] * 2)
    outcome = await decide(client(fake), CANDIDATE, [berlin])
    assert isinstance(outcome, Fallback)
    assert outcome.reason == "invalid_output"
    assert invented in (outcome.raw_output or "")
    assert "not one of the existing ids" in fake.requests[1]["messages"][-1]["content"]


async def test_decide_without_neighbours_adds_without_asking(fake: FakeOpenAI) -> None:
    outcome = await decide(client(fake), CANDIDATE, [])
    assert isinstance(outcome, Ok)
    assert outcome.value.action is Action.ADD
    assert fake.requests == []


async def test_extracted_facts_are_the_users_own_and_share_the_rule_paths_ids(fake: FakeOpenAI) -> None:
    turns = [turn_event(0, "I live in Berlin and I love green tea."), turn_event(1, "You should try matcha!")]
    facts = [
        {"kind": "fact", "text": "User lives in Berlin", "category": "location", "key": "city", "value": "Berlin",
         "source_turn": 0, "importance": 0.85},
        {"kind": "preference", "text": "User loves green tea", "source_turn": 0},
        {"kind": "preference", "text": "User should try matcha", "source_turn": 1},
    ]  # fmt: skip
    fake.queue(answer({"facts": facts, "summary": "User lives in Berlin."}))
    outcome = await extract_facts(client(fake), turns, "User introduced themselves.")
    assert isinstance(outcome, Ok)
    assert outcome.value.summary == "User lives in Berlin."
    assert "User introduced themselves." in fake.requests[0]["messages"][1]["content"]
    candidates = fact_candidates(turns, outcome.value)
    assert [(c.type, c.text) for c in candidates] == [
        (MemoryType.FACT, "User lives in Berlin"),
        (MemoryType.PREFERENCE, "User loves green tea"),
    ]  # the assistant's suggestion is not the user's preference
    assert {c.extractor for c in candidates} == {"llm/v1"}
    assert candidates[0].source.event_ids == ["e0"]
    rule_fact = next(c for c in candidates_for_turn(turns[0]) if c.type is MemoryType.FACT)
    assert candidates[0].candidate_id == rule_fact.candidate_id  # one fact, whichever path found it


async def test_an_extracted_standing_preference_keeps_its_category(fake: FakeOpenAI) -> None:
    """An allergy or an instruction is pinned in every recall by its category; other categories are dropped."""
    turns = [turn_event(0, "I'm allergic to shellfish. Please answer in Spanish. I like jazz.")]
    facts = [
        {"kind": "preference", "text": "User is allergic to shellfish", "category": "constraint", "source_turn": 0},
        {"kind": "preference", "text": "User wants answers in Spanish", "category": "instruction", "source_turn": 0},
        {"kind": "preference", "text": "User likes jazz", "category": "music", "source_turn": 0},
    ]
    fake.queue(answer({"facts": facts}))
    outcome = await extract_facts(client(fake), turns)
    assert isinstance(outcome, Ok)
    assert '"constraint"' in fake.requests[0]["messages"][0]["content"]
    assert [c.category for c in fact_candidates(turns, outcome.value)] == ["constraint", "instruction", None]


async def test_extracted_fact_pointing_outside_the_slice_is_invalid(fake: FakeOpenAI) -> None:
    bad = answer({"facts": [{"kind": "preference", "text": "User likes tea", "source_turn": 7}]})
    fake.queue(bad, bad)
    outcome = await extract_facts(client(fake), TURNS)
    assert isinstance(outcome, Fallback)
    assert outcome.reason == "invalid_output"
    assert "source_turn [7]" in outcome.error
