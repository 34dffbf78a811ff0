"""Recall ranking and token packing: pure functions over candidate memories."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from schemas.memory import LAYER_OF_TYPE, MemoryLayer, MemoryType
from services.core.textutil import count_tokens

if TYPE_CHECKING:
    from services.core.config import Settings

HALF_LIFE_DAYS = 180.0
# The access signal reaches 1.0 here: beyond this many recalls a memory is
# plainly useful, and more recalls must not let it outweigh similarity.
ACCESS_SATURATION = 50
# Share of the budget left after procedural memory that semantic memory may take
# in the sectioned prompt; episodic memory gets the rest.
SEMANTIC_SHARE = 0.6
SECTION_TITLES: dict[MemoryLayer, str] = {
    MemoryLayer.PROCEDURAL: "USER PROFILE",
    MemoryLayer.SEMANTIC: "PRIOR CONTEXT",
    MemoryLayer.EPISODIC: "RECENT SESSIONS",
}
_WORD = re.compile(r"\w+")
# Memory types that restate turns (a question asked in one, a preference stated in one, an episode
# summarising some): next to those turns' exchanges they add nothing. A keyed fact is kept: it is the
# current value (a later move supersedes it, while the turn that said the old one stays an exchange).
REDUNDANT_NEXT_TO_TURN = frozenset(t.value for t in MemoryType) - {MemoryType.EXCHANGE.value, MemoryType.FACT.value}


@dataclass(frozen=True)
class Weights:
    similarity: float = 0.40
    recency: float = 0.05
    importance: float = 0.20
    access: float = 0.10
    entity: float = 0.02

    @classmethod
    def from_settings(cls, settings: Settings) -> Weights:
        return cls(
            similarity=settings.recall_weight_similarity,
            recency=settings.recall_weight_recency,
            importance=settings.recall_weight_importance,
            access=settings.recall_weight_access,
            entity=settings.recall_weight_entity,
        )


@dataclass(frozen=True)
class Candidate:
    id: str
    type: str
    text: str
    similarity: float
    importance: float
    access_count: int
    observed_at: datetime
    entities: list[str]
    source: dict[str, Any]
    pinned: bool = False
    last_accessed_at: datetime | None = None
    signals: dict[str, float] = field(default_factory=dict)
    score: float = 0.0

    @property
    def layer(self) -> MemoryLayer:
        return layer_of(self.type)


def layer_of(type_: str) -> MemoryLayer:
    """The recall layer of a memory type; an unknown type is treated as episodic (what happened)."""
    try:
        return LAYER_OF_TYPE[MemoryType(type_)]
    except ValueError:
        return MemoryLayer.EPISODIC


def recency(observed_at: datetime, now: datetime, last_accessed_at: datetime | None = None) -> float:
    """Halves every 180 days since the memory was last seen: observed or recalled, whichever is later.

    A memory the user keeps coming back to stays fresh even if it was first
    said long ago.
    """
    seen = observed_at if last_accessed_at is None else max(observed_at, last_accessed_at)
    age_days = max((now - seen).total_seconds() / 86400.0, 0.0)
    return math.pow(0.5, age_days / HALF_LIFE_DAYS)


def access(access_count: int) -> float:
    """Log-scaled and capped at 1: the first few recalls count most, none can dominate the score."""
    return min(1.0, math.log1p(max(access_count, 0)) / math.log1p(ACCESS_SATURATION))


class QueryTerms:
    """The query as entity matching reads it, worked out once per recall rather than once per candidate."""

    def __init__(self, query: str) -> None:
        self.lowered = query.lower()
        self.words = {w.lower() for w in _WORD.findall(query)}

    def names_any(self, entities: list[str]) -> float:
        """1 when the query names one of the entities (as a word or inside a longer name), else 0."""
        return 1.0 if any((e := name.lower()) in self.words or e in self.lowered for name in entities) else 0.0


def score(c: Candidate, terms: QueryTerms, now: datetime, weights: Weights) -> Candidate:
    signals = {
        "similarity": c.similarity,
        "recency": recency(c.observed_at, now, c.last_accessed_at),
        "importance": c.importance,
        "access": access(c.access_count),
        "entity": terms.names_any(c.entities) if c.entities else 0.0,
    }
    total = (
        weights.similarity * signals["similarity"]
        + weights.recency * signals["recency"]
        + weights.importance * signals["importance"]
        + weights.access * signals["access"]
        + weights.entity * signals["entity"]
    )
    return _scored(c, signals, total)


def _scored(c: Candidate, signals: dict[str, float], total: float) -> Candidate:
    """`c` with its signals and score, as `dataclasses.replace` would make it, at a sixth of the cost.

    `replace` re-runs the frozen dataclass's `__init__` (2.7 us a candidate): with ~150
    candidates a recall that was 0.4 ms of its CPU (8 clients: 2-4 % more recalls/s without it).
    """
    scored = object.__new__(Candidate)
    scored.__dict__.update(c.__dict__, signals=signals, score=total)
    return scored


def rank(candidates: list[Candidate], query: str, now: datetime, weights: Weights) -> list[Candidate]:
    """Best score first, pinned or not: `pack` keeps pinned memories in the answer, the score places them.

    Pinned (profile) memories used to stand ahead of everything. On the
    LoCoMo dev set a profile fact was rarely the answer, and ahead of it
    it cost 6 points of R@1 and 3 of held-out R@5 (docs/usage/recall.md).
    """
    terms = QueryTerms(query)
    return sorted((score(c, terms, now, weights) for c in candidates), key=lambda c: (-c.score, c.id))


def cost(c: Candidate) -> int:
    return count_tokens(c.text) + 3  # "[TYPE] " prefix and newline


def source_events(c: Candidate) -> frozenset[str]:
    return frozenset(str(e) for e in c.source.get("event_ids") or ())


def _spaced_words(text: str) -> str:
    """Lower-cased words between single spaces, padded: `a in b` then matches whole words only."""
    return f" {' '.join(_WORD.findall(text.lower()))} "


def pack(ranked: list[Candidate], top_k: int, token_budget: int) -> tuple[list[Candidate], int]:
    """Greedy by rank: a memory that does not fit is skipped, smaller ones may still fit.

    A memory taken only from turns the answer already holds as exchanges (a
    preference or question from that very turn, an episode of those turns;
    REDUNDANT_NEXT_TO_TURN) is skipped too: the turns say it already, and the
    slot and the tokens go to something new.

    So is a memory whose words a memory already taken holds verbatim (an
    exchange an extractive episode quotes; compared as lower-cased words):
    on the LoCoMo dev set ~2 % of the candidates, and the freed places
    raised multi-hop R@10 by 0.3 on both halves. A pinned memory is never
    skipped for it.

    Pinned memories (the profile close to the query) are taken first, so
    they are in the answer whenever they fit (a preference stated in a turn
    the answer also holds included: it says what the user wants, the turn
    only that it was said), and listed at their place in the ranking.
    """
    chosen: list[Candidate] = []
    used = 0
    seen: set[str] = set()
    turns: set[str] = set()
    held: list[str] = []
    for c in sorted(ranked, key=lambda c: not c.pinned):  # stable: pinned first, each part in rank order
        if len(chosen) >= top_k:
            break
        if c.id in seen:
            continue
        tokens = cost(c)
        if used + tokens > token_budget:
            continue
        events = source_events(c)
        if c.type in REDUNDANT_NEXT_TO_TURN and events and events <= turns:
            continue
        words = _spaced_words(c.text)
        if not c.pinned and any(words in text for text in held):
            continue
        chosen.append(c)
        seen.add(c.id)
        held.append(words)
        used += tokens
        if c.type == MemoryType.EXCHANGE.value:
            turns |= events
    if not any(c.pinned for c in chosen):
        return chosen, used  # taken in rank order already
    place = {c.id: i for i, c in reversed(list(enumerate(ranked)))}
    return sorted(chosen, key=lambda c: place[c.id]), used


def pack_sections(ranked: list[Candidate], top_k: int, token_budget: int) -> tuple[list[Candidate], int]:
    """Layer by layer: procedural first, semantic within 60 % of what is left, episodic in the rest.

    How to act for the user matters most and is small; facts come next but
    may not crowd out what happened recently, so episodic memory always keeps
    at least 40 % of the budget procedural memory left. Within a layer the
    order is the rank; the result lists the layers in that order too, and the
    working layer is not packed here (the response carries the window).
    """
    chosen: list[Candidate] = []
    used = 0
    for layer in SECTION_TITLES:
        left = token_budget - used
        budget = int(left * SEMANTIC_SHARE) if layer is MemoryLayer.SEMANTIC else left
        taken, spent = pack([c for c in ranked if c.layer is layer], top_k - len(chosen), budget)
        chosen.extend(taken)
        used += spent
        if len(chosen) >= top_k:
            break
    return chosen, used


def prompt_block(chosen: list[Candidate]) -> str:
    lines = [f"[{c.type.upper()}] {c.text}" for c in chosen]
    return "\n".join(["<memory>", *lines, "</memory>"])


def prompt_sections(chosen: list[Candidate]) -> str:
    """USER PROFILE / PRIOR CONTEXT / RECENT SESSIONS, each a titled group of `[TYPE] text` lines; empty ones left out."""
    parts: list[str] = []
    for layer, title in SECTION_TITLES.items():
        lines = [f"[{c.type.upper()}] {c.text}" for c in chosen if c.layer is layer]
        if lines:
            parts.append("\n".join([f"{title}:", *lines]))
    return "\n\n".join(parts)
