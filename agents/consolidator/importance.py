"""Importance at ingest: how new a candidate is for its user, and how much it says.

importance = 0.6 · novelty + 0.4 · salience, both in [0, 1]. Pure: the
consolidator supplies the user's per-type centroid (a running sum and count,
so candidates earlier in the same batch count too).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from agents.rules.patterns import PREFERENCE_CUES
from schemas import MemoryCandidate, MemoryType
from schemas.memory import STANDING_CATEGORIES

NOVELTY_WEIGHT = 0.6
SALIENCE_WEIGHT = 0.4
ENTITY_SALIENCE = 0.3
NUMBER_SALIENCE = 0.2
PREFERENCE_SALIENCE = 0.4
RARE_SALIENCE = 0.1
# Without a corpus frequency list, a long word or a mixed-case / alphanumeric
# token ("iPhone", "GPT4", "mRNA") is the cheap stand-in for a rare term.
RARE_WORD_LENGTH = 10
# The least importance of a standing preference (a diet, an instruction: schemas.memory.STANDING_CATEGORIES).
STANDING_IMPORTANCE = 0.9

# Types always stored whatever their importance: what the user said about
# themselves is the profile, and a low score there is a scoring error.
ALWAYS_KEPT = frozenset({MemoryType.FACT, MemoryType.PREFERENCE})

_MONTHS = (
    "january|february|march|april|may|june|july|august|september|october|november|december"
    "|jan|feb|mar|apr|jun|jul|aug|sep|sept|oct|nov|dec"
)
_NUMBER = re.compile(
    rf"\d|\b(?:{_MONTHS})\b|\b(?:monday|tuesday|wednesday|thursday|friday|saturday|sunday"
    r"|yesterday|today|tomorrow|tonight|weekend|last (?:week|month|year)|next (?:week|month|year)"
    r"|one|two|three|four|five|six|seven|eight|nine|ten|twelve|twenty|hundred|thousand|million)\b",
    re.IGNORECASE,
)
_SPEAKER_LABEL = re.compile(r"^\s*[A-Z][\w .'-]{0,30}:\s+")
_TOKEN = re.compile(r"[A-Za-z][A-Za-z0-9'-]*")


@dataclass
class Centroid:
    """Running sum of one user's active vectors of one type, and how many there are."""

    total: np.ndarray
    count: int

    def add(self, vector: Sequence[float]) -> None:
        self.total = self.total + np.asarray(vector, dtype=np.float64)
        self.count += 1


def cosine(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray) -> float:
    va, vb = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    denominator = float(np.linalg.norm(va) * np.linalg.norm(vb))
    return 0.0 if denominator == 0.0 else float(va @ vb) / denominator


def novelty(vector: Sequence[float], centroid: Centroid | None) -> float:
    """Cosine distance to the centroid, clamped to [0, 1]; 1.0 when the user has nothing of this type yet."""
    if centroid is None or centroid.count == 0 or len(centroid.total) != len(vector):
        return 1.0
    return min(1.0, max(0.0, 1.0 - cosine(vector, centroid.total)))


def _rare_term(text: str) -> bool:
    for token in _TOKEN.findall(text):
        if len(token) >= RARE_WORD_LENGTH:
            return True
        inner = token[1:]
        if any(ch.isdigit() for ch in token) or (
            any(ch.isupper() for ch in inner) and any(ch.islower() for ch in token)
        ):
            return True
    return False


def salience(candidate: MemoryCandidate) -> float:
    """Named entities +0.3, numbers or dates +0.2, a preference signal +0.4, a rare term +0.1; at most 1.0.

    Entities are the extractor's (capitalised phrases not at a sentence start);
    a leading "Name:" speaker label is not content and is ignored.
    """
    text = _SPEAKER_LABEL.sub("", candidate.text)
    score = 0.0
    if candidate.entities:
        score += ENTITY_SALIENCE
    if _NUMBER.search(text):
        score += NUMBER_SALIENCE
    if candidate.type is MemoryType.PREFERENCE or PREFERENCE_CUES.search(text):
        score += PREFERENCE_SALIENCE
    if _rare_term(text):
        score += RARE_SALIENCE
    return min(1.0, score)


def importance(candidate: MemoryCandidate, vector: Sequence[float], centroid: Centroid | None) -> float:
    score = min(1.0, NOVELTY_WEIGHT * novelty(vector, centroid) + SALIENCE_WEIGHT * salience(candidate))
    if candidate.type is MemoryType.PREFERENCE and candidate.category in STANDING_CATEGORIES:
        # A second allergy reads like the first (low novelty) and matters as much.
        score = max(score, STANDING_IMPORTANCE)
    return round(score, 4)


def kept(type_: MemoryType, score: float, min_importance: float, scope: frozenset[MemoryType]) -> bool:
    """Whether a candidate is stored as its own memory.

    Facts and preferences always are; the threshold applies only to the types
    in `scope` (see THRESHOLD_SCOPE), everything else is stored as before.
    """
    return type_ in ALWAYS_KEPT or type_ not in scope or score >= min_importance


# Types the importance threshold may drop. Not exchanges: they are the raw
# turns recall falls back on, and dropping those below 0.3 cost LoCoMo
# 12 points of R@10 (62.8 -> 50.9). Not episodes: every evicted turn must be
# covered by some episode, and a repeated theme has low novelty by design
# (maintenance folds such episodes into a pattern instead of losing them).
THRESHOLD_SCOPE = frozenset({MemoryType.SEMANTIC, MemoryType.PATTERN})
