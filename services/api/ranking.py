"""Recall ranking and token packing: pure functions over candidate memories."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from services.textutil import count_tokens

HALF_LIFE_DAYS = 180.0
_WORD = re.compile(r"\w+")


@dataclass(frozen=True)
class Weights:
    similarity: float = 0.40
    recency: float = 0.25
    importance: float = 0.20
    access: float = 0.10
    entity: float = 0.05


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
    signals: dict[str, float] = field(default_factory=dict)
    score: float = 0.0


def recency(observed_at: datetime, now: datetime) -> float:
    age_days = max((now - observed_at).total_seconds() / 86400.0, 0.0)
    return math.pow(0.5, age_days / HALF_LIFE_DAYS)


def entity_match(query: str, entities: list[str]) -> float:
    words = {w.lower() for w in _WORD.findall(query)}
    return 1.0 if any(e.lower() in words or e.lower() in query.lower() for e in entities) else 0.0


def score(c: Candidate, query: str, now: datetime, weights: Weights) -> Candidate:
    signals = {
        "similarity": c.similarity,
        "recency": recency(c.observed_at, now),
        "importance": c.importance,
        "access": min(1.0, math.log1p(c.access_count) / math.log(10)),
        "entity": entity_match(query, c.entities),
    }
    total = sum(getattr(weights, k) * v for k, v in signals.items())
    return Candidate(**{**c.__dict__, "signals": signals, "score": total})


def rank(candidates: list[Candidate], query: str, now: datetime, weights: Weights) -> list[Candidate]:
    """Pinned (profile) memories keep their order ahead of the scored rest."""
    scored = [score(c, query, now, weights) for c in candidates]
    pinned = [c for c in scored if c.pinned]
    rest = sorted((c for c in scored if not c.pinned), key=lambda c: (-c.score, c.id))
    return pinned + rest


def pack(ranked: list[Candidate], top_k: int, token_budget: int) -> tuple[list[Candidate], int]:
    """Greedy by rank: a memory that does not fit is skipped, smaller ones may still fit."""
    chosen: list[Candidate] = []
    used = 0
    seen: set[str] = set()
    for c in ranked:
        if len(chosen) >= top_k:
            break
        if c.id in seen:
            continue
        cost = count_tokens(c.text) + 3  # "[TYPE] " prefix and newline
        if used + cost > token_budget:
            continue
        chosen.append(c)
        seen.add(c.id)
        used += cost
    return chosen, used


def prompt_block(chosen: list[Candidate]) -> str:
    lines = [f"[{c.type.upper()}] {c.text}" for c in chosen]
    return "\n".join(["<memory>", *lines, "</memory>"])
