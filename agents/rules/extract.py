"""Inline extraction without an LLM: keyed facts and preferences from one turn.

Bounded whatever the turn: every rule pattern is linear in the text's length
(agents/rules/patterns.py), facts are searched window by window and
preferences clause by clause (each one regex call over a bounded length, so
a worker thread running this holds the GIL for milliseconds at a time, never
for a turn), a turn yields at most MAX_PREFERENCES preferences, and
extract() stops at its time budget (counted in memstream_rules_stopped_total).
The budget is a backstop: the worst turns found take a fraction of it
(tests/bench/rules_worst.py); a turn cut short keeps the hits found so far.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

from agents.rules.patterns import FACT_RULES, NEGATIVE_CUES, PREFERENCE_CUES, STANDING_CUES, retracted
from schemas import MemoryType
from schemas.memory import CONSTRAINT, RETRACTION
from services.core import metrics
from services.core.textutil import LETTER, normalize

_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")
# Words that say nothing about what is liked: "I love it!", "Yeah, I love to."
_EMPTY_WORDS = frozenset(
    """i me my mine it its this that these those you your we us our they them he she him her to so too yeah yes
    oh wow really just a an the and or but very much lot lots do does did don't not never always usually would
    rather i'd can't stand please all time favorite favourite fav is are was be prefer like love enjoy hate
    dislike adore want one ones i'm am eat keep allergic intolerant anything enough more now right today""".split()
)
# Where a sentence joins two things the user says of themself: "I live in Berlin and I'm vegetarian" is a city
# and a diet, and the diet alone is the preference (pinned in every recall, it must not repeat the old city).
# One space on each side: a run of spaces tried from every position would be quadratic.
_JOINED = re.compile(r",?\s(?:and|but|while|whereas)\s(?=(?:i|i'm|i've|i'd|my)\b)", re.IGNORECASE)
_SPEAKER_LABEL = re.compile(r"^\s*[A-Z][\w .'-]{0,30}:\s+")
_WORDS = re.compile(rf"{LETTER}(?:{LETTER}|'){{0,63}}")
# A run-on "sentence" (a paste with no full stops) is read in clauses of at most this many characters.
MAX_CLAUSE_CHARS = 600
# More distinct preferences than this in one turn is a list or a paste, not a user telling what they like.
MAX_PREFERENCES = 32
# Facts are searched in windows of WINDOW_CHARS, each reaching WINDOW_OVERLAP further: more than any rule's
# match spans plus what its lookahead reads (a unit test checks), so windows find what one search would.
WINDOW_CHARS = 4096
WINDOW_OVERLAP = 512
# Wall time one turn's extraction may take; the worst turn at the content limit needs well under it.
BUDGET_SECONDS = 0.5


@dataclass(frozen=True)
class Extraction:
    type: MemoryType
    text: str
    importance: float
    confidence: float
    category: str | None = None
    key_name: str | None = None
    value: str | None = None


class Deadline:
    """A time budget that, once spent, stays spent (`None`: no budget)."""

    def __init__(self, seconds: float | None) -> None:
        self._at = None if seconds is None else time.perf_counter() + seconds
        self.passed = False

    def over(self) -> bool:
        if not self.passed and self._at is not None and time.perf_counter() >= self._at:
            self.passed = True
        return self.passed


def sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE.split(text) if s.strip()]


def clauses(text: str, limit: int = MAX_CLAUSE_CHARS) -> list[str]:
    """Sentences, a longer one cut into pieces of at most `limit` characters, at a space where there is one."""
    out: list[str] = []
    for sentence in sentences(text):
        start = 0
        while len(sentence) - start > limit:
            cut = sentence.rfind(" ", start + limit // 2, start + limit + 1)
            cut = cut if cut > start else start + limit
            out.append(sentence[start:cut].strip())
            start = cut
        out.append(sentence[start:].strip())
    return [c for c in out if c]


def _clean(value: str) -> str:
    return value.strip(" .,!?;:'\"").strip()


def first_match(pattern: re.Pattern[str], text: str, deadline: Deadline | None = None) -> re.Match[str] | None:
    """`pattern.search(text)`, one window at a time; None once `deadline` passes.

    A search from `start` sees the text before it (lookbehinds, `\b`), and a
    match starting in a window ends inside its overlap, so the first window
    with a match starting in it gives the whole text's first match.
    """
    for start in range(0, len(text), WINDOW_CHARS):
        if deadline is not None and deadline.over():
            return None
        end = min(start + WINDOW_CHARS + WINDOW_OVERLAP, len(text))
        match = pattern.search(text, start, end)
        if match is not None and (match.start() < start + WINDOW_CHARS or end == len(text)):
            return match
    return None


def extract_facts(text: str, deadline: Deadline | None = None) -> list[Extraction]:
    """The first hit of each rule, one per (category, key); rules in table order until `deadline`."""
    out: dict[tuple[str, str], Extraction] = {}
    for rule in FACT_RULES:
        match = first_match(rule.pattern, text, deadline)
        if deadline is not None and deadline.passed:
            break
        if match is None:
            continue
        fields = {k: _clean(v) for k, v in match.groupdict().items() if v}
        value, key = fields.get("value", ""), rule.key.format(**fields).lower()
        if not value or (rule.category, key) in out:
            continue
        out[(rule.category, key)] = Extraction(
            type=MemoryType.FACT,
            text=rule.template.format(**fields),
            importance=rule.importance,
            confidence=rule.confidence,
            category=rule.category,
            key_name=key,
            value=value,
        )
    return list(out.values())


def _has_object(sentence: str) -> bool:
    """Whether the sentence names something liked, beyond the cue and pronouns."""
    words = _WORDS.findall(_SPEAKER_LABEL.sub("", sentence).lower())
    return any(w not in _EMPTY_WORDS for w in words)


_NAME_RULES = tuple(rule for rule in FACT_RULES if (rule.category, rule.key) == ("identity", "name"))


def self_names(text: str) -> list[str]:
    """The names a user gives themself in `text` ("Hi, I'm Dana", "call me Sam")."""
    found = (first_match(rule.pattern, text) for rule in _NAME_RULES)
    return [_clean(match["value"]) for match in found if match is not None]


def extract_preferences(text: str, deadline: Deadline | None = None) -> list[Extraction]:
    """Clauses that state a preference, or take one back, each once, at most MAX_PREFERENCES, until `deadline`.

    A clause that takes a preference back ("I'm no longer vegetarian", "Please forget that I like jazz", "I used
    to love techno") is a preference of category RETRACTION whose `value` names what it takes back: the
    consolidator supersedes the user's earlier preferences that say it. A diet said in the negative ("I don't
    eat meat anymore") is a constraint, as ever.
    """
    out: dict[str, Extraction] = {}
    for clause in (part.strip() for whole in clauses(text) for part in _JOINED.split(whole)):
        if deadline is not None and deadline.over():
            break
        key = normalize(clause)
        if key in out or clause.endswith("?"):
            continue
        taken_back = None if STANDING_CUES[CONSTRAINT].search(clause) else retracted(clause)
        if taken_back is None and (not PREFERENCE_CUES.search(clause) or not _has_object(clause)):
            continue
        if len(out) == MAX_PREFERENCES:
            metrics.RULES_STOPPED.labels(reason="hits").inc()
            break
        negative = taken_back is not None or bool(NEGATIVE_CUES.search(clause))
        out[key] = Extraction(
            type=MemoryType.PREFERENCE,
            text=f"User preference: {clause}",
            importance=0.75 if negative else 0.7,
            confidence=0.8,
            category=RETRACTION if taken_back is not None else _category(clause, negative),
            value=taken_back,
        )
    return list(out.values())


def _category(clause: str, negative: bool) -> str:
    """A standing category (a diet, an instruction), else like or dislike."""
    standing = (name for name, cue in STANDING_CUES.items() if cue.search(clause))
    return next(standing, "dislike" if negative else "like")


def extract(text: str, budget: float | None = BUDGET_SECONDS) -> list[Extraction]:
    """All rule hits for one user turn, facts first, found within `budget` seconds (None: no limit)."""
    started = time.perf_counter()
    deadline = Deadline(budget)
    found = [*extract_facts(text, deadline), *extract_preferences(text, deadline)]
    if deadline.passed:
        metrics.RULES_STOPPED.labels(reason="budget").inc()
    metrics.RULES_SECONDS.observe(time.perf_counter() - started)
    return found
