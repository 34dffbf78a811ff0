"""The LLM operations: each a prompt, a pydantic answer model and a pure mapping.

Every function returns the client's `Outcome`: `Ok(answer)` or `Fallback`, on
which the caller keeps its rule/extractive path (and dead-letters the raw
output when `fallback.dead_letter`). Nothing here writes anywhere.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from schemas import MemoryCandidate, MemoryRecord, MemoryType, Provenance, Role, TurnEvent
from schemas.memory import STANDING_CATEGORIES
from services.core.textutil import normalize, stable_id
from services.llm.client import Fallback, LlmClient, Ok, Outcome

EXTRACTOR = "llm/v1"
OPERATIONS = ("extract_facts", "decide", "summarize_episode", "synthesize")
# Longest turn text sent to the model: a pasted document must not blow the context.
_MAX_TURN_CHARS = 4000


class _Answer(BaseModel):
    model_config = ConfigDict(extra="ignore")


def render_turns(turns: Sequence[TurnEvent]) -> str:
    """Numbered so an answer can point at the turn it took a fact from."""
    return "\n".join(f"[{i}] {t.role.value}: {t.content[:_MAX_TURN_CHARS]}" for i, t in enumerate(turns))


# --- (a) fact extraction -------------------------------------------------------------------------------------------

EXTRACT_SYSTEM = """You extract long-term memories about the USER from a slice of a chat.
Rules:
- Only what the user states about themselves (turns marked "user"); never what the assistant says or suggests.
- Atomic: one fact or preference per item, written as a short third-person sentence ("User lives in Berlin").
- kind "fact" for profile facts (give category, key and value, e.g. location/city/Berlin,
  identity/name/Ana, work/occupation/nurse); kind "preference" for likes,
  dislikes and how the user wants things done. A preference that holds whatever the user asks gets a
  category: "constraint" for what they cannot or will not eat or use (an allergy, a diet), "instruction"
  for how they want every answer (language, length, tone, format).
- source_turn is the [number] of the user turn the item comes from.
- summary: the rolling summary of the session so far, updated with this slice, at most 5 sentences.
- Nothing worth remembering: an empty "facts" list."""


class ExtractedFact(_Answer):
    kind: Literal["fact", "preference"]
    text: str = Field(min_length=1, max_length=500)
    category: str | None = None
    key: str | None = None
    value: str | None = None
    source_turn: int = Field(ge=0)
    importance: float = Field(default=0.6, ge=0.0, le=1.0)


class FactsAnswer(_Answer):
    facts: list[ExtractedFact]
    summary: str = ""


class ExtractedFactsCheck:
    """A source_turn outside the slice is a hallucination: invalid output, worth a repair."""

    def __init__(self, count: int) -> None:
        self.count = count

    def __call__(self, answer: FactsAnswer) -> str | None:
        bad = sorted({f.source_turn for f in answer.facts if f.source_turn >= self.count})
        return f"source_turn {bad} not among the turns 0..{self.count - 1}" if bad else None


async def extract_facts(
    client: LlmClient, turns: Sequence[TurnEvent], rolling_summary: str = ""
) -> Outcome[FactsAnswer]:
    user = f"Session summary so far: {rolling_summary or '(none)'}\n\nNew turns:\n{render_turns(turns)}"
    return await client.complete_json(
        "extract_facts", EXTRACT_SYSTEM, user, FactsAnswer, ExtractedFactsCheck(len(turns))
    )


def _fact_id(tenant: str, user: str, fact: ExtractedFact, kind: MemoryType) -> str:
    """The rule path's id scheme (agents/rules/candidates.py): the same fact from either path is one memory."""
    if kind is MemoryType.FACT and fact.key and fact.value:
        return stable_id(tenant, user, kind.value, fact.category or "", fact.key.lower(), normalize(fact.value))
    return stable_id(tenant, user, kind.value, normalize(fact.text))


def fact_candidates(turns: Sequence[TurnEvent], answer: FactsAnswer) -> list[MemoryCandidate]:
    """Candidates for the facts that point at a user turn; the rest are the assistant's words, not the user's."""
    out: dict[str, MemoryCandidate] = {}
    for fact in answer.facts:
        turn = turns[fact.source_turn] if fact.source_turn < len(turns) else None
        if turn is None or turn.role is not Role.USER:
            continue
        kind = MemoryType.FACT if fact.kind == "fact" else MemoryType.PREFERENCE
        keyed = kind is MemoryType.FACT and bool(fact.key and fact.value)
        candidate_id = _fact_id(turn.tenant_id, turn.user_id, fact, kind)
        out[candidate_id] = MemoryCandidate(
            candidate_id=candidate_id,
            tenant_id=turn.tenant_id,
            user_id=turn.user_id,
            type=kind,
            text=fact.text.strip(),
            category=fact.category if keyed or fact.category in STANDING_CATEGORIES else None,
            key_name=fact.key.lower() if keyed and fact.key else None,
            value=fact.value if keyed else None,
            importance=fact.importance,
            confidence=0.8,
            observed_at=turn.ts,
            source=Provenance(session_id=turn.session_id, event_ids=[turn.event_id], metadata=[turn.metadata]),
            extractor=EXTRACTOR,
        )
    return list(out.values())


# --- (b) ADD / UPDATE / DELETE / NONE --------------------------------------------------------------------------------

DECIDE_SYSTEM = """You maintain a user's long-term memory. Given a NEW memory and the most similar EXISTING ones, choose:
- ADD: the new memory is new information.
- UPDATE: it replaces one existing memory (a changed value, a more specific version); target_id = that memory's id.
- DELETE: it says one existing memory is no longer true and replaces it with nothing; target_id = that memory's id.
- NONE: it adds nothing (already known, or not worth keeping).
target_id must be one of the ids listed, exactly; null for ADD and NONE."""


class Action(StrEnum):
    ADD = "ADD"
    UPDATE = "UPDATE"
    DELETE = "DELETE"
    NONE = "NONE"


class Decision(_Answer):
    action: Action
    target_id: str | None = None
    reason: str = ""


class DecisionCheck:
    """UPDATE and DELETE must name a neighbour; an invented id would touch a memory nobody showed the model."""

    def __init__(self, ids: Sequence[str]) -> None:
        self.ids = frozenset(ids)

    def __call__(self, decision: Decision) -> str | None:
        if decision.action in (Action.UPDATE, Action.DELETE):
            if decision.target_id not in self.ids:
                return f"target_id {decision.target_id!r} is not one of the existing ids {sorted(self.ids)}"
        elif decision.target_id is not None and decision.target_id not in self.ids:
            return f"target_id must be null for {decision.action.value}"
        return None


def render_decision(candidate: MemoryCandidate, neighbours: Sequence[MemoryRecord]) -> str:
    existing = "\n".join(f"- id={n.id} type={n.type.value}: {n.text}" for n in neighbours)
    return f"NEW ({candidate.type.value}): {candidate.text}\n\nEXISTING:\n{existing}"


async def decide(
    client: LlmClient, candidate: MemoryCandidate, neighbours: Sequence[MemoryRecord]
) -> Outcome[Decision]:
    """With no neighbour there is nothing to compare: ADD without a request."""
    if not neighbours:
        return Ok(Decision(action=Action.ADD, reason="no similar memory"))
    check = DecisionCheck([n.id for n in neighbours])
    return await client.complete_json("decide", DECIDE_SYSTEM, render_decision(candidate, neighbours), Decision, check)


# --- (c) episodes and semantic synthesis ------------------------------------------------------------------------------

EPISODE_SYSTEM = """You write the episodic memory of a stretch of conversation between a user and an assistant.
summary: 1-4 sentences, third person ("The user ..."), what was discussed, decided or planned; concrete names, dates, numbers.
topics: up to 5 short lowercase topic words or phrases.
open_questions: questions the user asked that were not answered (verbatim or close), else empty."""


class EpisodeAnswer(_Answer):
    summary: str = Field(min_length=1, max_length=2000)
    topics: list[str] = Field(default_factory=list, max_length=10)
    open_questions: list[str] = Field(default_factory=list, max_length=10)


async def summarize_episode(client: LlmClient, turns: Sequence[TurnEvent]) -> Outcome[EpisodeAnswer]:
    return await client.complete_json("summarize_episode", EPISODE_SYSTEM, render_turns(turns), EpisodeAnswer)


SYNTHESIZE_SYSTEM = """You write one semantic memory: what is known about the user on one topic, from memories of several
sessions. 1-3 sentences, third person, only what the memories support, no speculation."""


class SynthesisAnswer(_Answer):
    text: str = Field(min_length=1, max_length=2000)


async def synthesize(client: LlmClient, topic: str, memories: Sequence[str]) -> Outcome[str]:
    user = f"Topic: {topic}\n\nMemories:\n" + "\n".join(f"- {m}" for m in memories)
    outcome = await client.complete_json("synthesize", SYNTHESIZE_SYSTEM, user, SynthesisAnswer)
    return outcome if isinstance(outcome, Fallback) else Ok(outcome.value.text.strip(), outcome.repaired)
