"""Extractive episodic summaries: the default, needing no model at all.

Sentences are scored by how many of the chunk's frequent content words they
carry, with a bonus for the user's own words; the best few are kept in their
original order so the summary still reads as the conversation went.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from datetime import datetime

from agents.rules.extract import entities, sentences
from schemas import Role, TurnEvent
from services.textutil import content_words


@dataclass(frozen=True)
class Episode:
    text: str
    topics: list[str]
    entities: list[str]
    open_questions: list[str]
    started_at: datetime
    ended_at: datetime


MAX_SENTENCE_TOKENS = 40


def _shorten(sentence: str) -> str:
    words = sentence.split()
    return sentence if len(words) <= MAX_SENTENCE_TOKENS else " ".join(words[:MAX_SENTENCE_TOKENS]) + " ..."


def summarize(turns: list[TurnEvent], max_sentences: int) -> Episode | None:
    """None when the chunk has nothing worth remembering (greetings, empty turns)."""
    scored: list[tuple[float, int, str]] = []
    frequency: Counter[str] = Counter()
    for turn in turns:
        frequency.update(content_words(turn.content))
    if not frequency:
        return None
    position = 0
    for turn in turns:
        for sentence in sentences(turn.content):
            words = content_words(sentence)
            if not words:
                continue
            score = sum(frequency[w] for w in set(words)) / math.sqrt(len(words) + 1)
            if turn.role is Role.USER:
                score *= 1.5
            scored.append((score, position, f"{turn.role.value}: {_shorten(sentence)}"))
            position += 1
    if not scored:
        return None
    best = sorted(scored, key=lambda s: (-s[0], s[1]))[:max_sentences]
    chosen = [text for _, _, text in sorted(best, key=lambda s: s[1])]
    topics = [w for w, _ in frequency.most_common(5)]
    started, ended = min(t.ts for t in turns), max(t.ts for t in turns)
    questions = [s for t in turns if t.role is Role.USER for s in sentences(t.content) if s.endswith("?")]
    header = f"Conversation on {started.date().isoformat()} about {', '.join(topics[:3])}."
    return Episode(
        text=" ".join([header, *chosen]),
        topics=topics,
        # Per turn: joined, a name ending one turn and a capital starting the next read as one entity.
        entities=list(dict.fromkeys(e for t in turns for e in entities(t.content))),
        open_questions=questions[-3:],
        started_at=started,
        ended_at=ended,
    )
