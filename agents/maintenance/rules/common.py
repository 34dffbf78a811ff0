"""Helpers several rules share: cosines at a fixed precision, an episode's terms, how a span or a duration reads."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import timedelta

import numpy as np

from agents import episode_text
from schemas import MemoryRecord
from services.core.textutil import content_words

# Similarities are compared at this precision: a re-plan over fewer rows (another matrix shape, other
# floating-point rounding) must see the same ties and thresholds as the pass before it.
SIMILARITY_DECIMALS = 6
SNIPPET_CHARS = 200

Vector = list[float]


def unit(vector: Sequence[float]) -> np.ndarray:
    v = np.asarray(vector, dtype=np.float64)
    norm = float(np.linalg.norm(v))
    return v / norm if norm > 0 else v


def mean_vector(vectors: Iterable[Sequence[float]]) -> Vector:
    """The normalised mean: where a group of members points, in the same space as they do."""
    return [float(x) for x in unit(np.mean([unit(v) for v in vectors], axis=0))]


def similarities(vectors: Sequence[Sequence[float]]) -> np.ndarray:
    """Pairwise cosines, symmetric and rounded (see SIMILARITY_DECIMALS)."""
    m = np.stack([unit(v) for v in vectors])
    sim = m @ m.T
    rounded: np.ndarray = np.round((sim + sim.T) / 2, SIMILARITY_DECIMALS)
    return rounded


def ordered_terms(record: MemoryRecord) -> list[str]:
    """An episode's terms: the content words of its `category` (its summary's topics, most frequent first)."""
    return list(dict.fromkeys(content_words(record.category or "")))


def terms_of(record: MemoryRecord) -> set[str]:
    return set(ordered_terms(record))


def span(members: Sequence[MemoryRecord]) -> str:
    first = min(r.observed_at for r in members).date().isoformat()
    last = max(r.observed_at for r in members).date().isoformat()
    return first if first == last else f"{first} to {last}"


def days(span: timedelta) -> str:
    days = span / timedelta(days=1)
    return f"{days:g} days"


def snippet(record: MemoryRecord) -> str:
    """An episode quoted in a pattern or topic: without its header (the quoting sentence names the theme and the
    dates), at most SNIPPET_CHARS, cut between words."""
    text = episode_text.body(record.text)
    if len(text) <= SNIPPET_CHARS:
        return text
    cut = text.rfind(" ", 0, SNIPPET_CHARS)
    return text[: cut if cut > 0 else SNIPPET_CHARS].rstrip(" ,;:") + " …"
