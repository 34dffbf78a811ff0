"""Inline extraction without an LLM: keyed facts and preferences from one turn."""

from __future__ import annotations

import re
from dataclasses import dataclass

from agents.rules.patterns import FACT_RULES, NEGATIVE_CUES, PREFERENCE_CUES
from schemas import MemoryType

_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")
_ENTITY = re.compile(r"(?<![.!?]\s)(?<!^)\b([A-Z][a-z]+(?:\s+[A-Z][a-z]+)*)")
# Words that say nothing about what is liked: "I love it!", "Yeah, I love to."
_EMPTY_WORDS = frozenset(
    """i me my mine it its this that these those you your we us our they them he she him her to so too yeah yes
    oh wow really just a an the and or but very much lot lots do does did don't not never always usually would
    rather i'd can't stand please all time favorite favourite fav is are was be prefer like love enjoy hate
    dislike adore want one ones""".split()
)
_SPEAKER_LABEL = re.compile(r"^\s*[A-Z][\w .'-]{0,30}:\s+")
_WORDS = re.compile(r"[a-z][a-z']*")
_STOP_ENTITIES = frozenset(
    {"I", "I'm", "I've", "I'd", "The", "This", "That", "My", "We", "Our", "It", "Hi", "Hey", "Yes", "No", "Oh", "So"}
)


@dataclass(frozen=True)
class Extraction:
    type: MemoryType
    text: str
    importance: float
    confidence: float
    category: str | None = None
    key_name: str | None = None
    value: str | None = None


def sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE.split(text) if s.strip()]


def entities(text: str) -> list[str]:
    """Capitalised phrases not at a sentence start: cheap, good enough for boosts."""
    found: dict[str, None] = {}
    for match in _ENTITY.finditer(text):
        name = match.group(1)
        if name not in _STOP_ENTITIES:
            found[name] = None
    return list(found)


def _clean(value: str) -> str:
    return value.strip(" .,!?;:'\"").strip()


def extract_facts(text: str) -> list[Extraction]:
    out: dict[tuple[str, str], Extraction] = {}
    for rule in FACT_RULES:
        match = rule.pattern.search(text)
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


def extract_preferences(text: str) -> list[Extraction]:
    out: list[Extraction] = []
    for sentence in sentences(text):
        if sentence.endswith("?") or not PREFERENCE_CUES.search(sentence) or not _has_object(sentence):
            continue
        negative = bool(NEGATIVE_CUES.search(sentence))
        out.append(
            Extraction(
                type=MemoryType.PREFERENCE,
                text=f"User preference: {sentence}",
                importance=0.75 if negative else 0.7,
                confidence=0.8,
                category="dislike" if negative else "like",
            )
        )
    return out


def extract(text: str) -> list[Extraction]:
    """All rule hits for one user turn, facts first."""
    return [*extract_facts(text), *extract_preferences(text)]
