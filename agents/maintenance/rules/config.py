"""The rules' settings: every threshold and rate of a pass, read once from Settings.

A frozen value, so a pass (and its re-run) plans with one set of rules
throughout; the defaults are the values chosen for each rule (see its module).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from services.core.config import Settings

PATTERN_SPREAD = 1.0
PATTERN_PRIOR_PAIRS = 200.0
SEMANTIC_MIN_MEMBERS = 3
SEMANTIC_MAX_TOPICS = 5
TOPIC_OVERLAP = 0.5


@dataclass(frozen=True)
class Rules:
    decay_half_life: timedelta
    decay_after: timedelta
    prune_below: float
    prune_after: timedelta
    pattern_min: int
    semantic_window: timedelta
    pattern_spread: float = PATTERN_SPREAD
    pattern_prior_pairs: float = PATTERN_PRIOR_PAIRS
    question_max_surfaced: int = 3
    question_defer_after: timedelta = timedelta(days=30)
    semantic_min_members: int = SEMANTIC_MIN_MEMBERS
    semantic_max_topics: int = SEMANTIC_MAX_TOPICS
    topic_overlap: float = TOPIC_OVERLAP

    @classmethod
    def from_settings(cls, s: Settings) -> Rules:
        return cls(
            decay_half_life=timedelta(days=s.decay_half_life_days),
            decay_after=timedelta(days=s.decay_after_days),
            prune_below=s.prune_below,
            prune_after=timedelta(days=s.prune_after_days),
            pattern_min=s.pattern_min_episodes,
            pattern_spread=s.pattern_spread,
            pattern_prior_pairs=s.pattern_prior_pairs,
            semantic_window=timedelta(days=s.semantic_window_days),
            question_max_surfaced=s.question_max_surfaced,
            question_defer_after=timedelta(days=s.question_defer_days),
        )
