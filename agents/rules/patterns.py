"""The rule table: what a user says and the memory it becomes.

Kept apart from the matching code so adding a rule is one line here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_NAME = r"(?P<value>[A-Z][\w'-]+(?: [A-Z][\w'-]+)?)"
_PLACE = r"(?P<value>[A-Z][\w.'-]*(?:[ ,]+[A-Z][\w.'-]*){0,3})"
_PHRASE = r"(?P<value>[\w][\w\s'&/+.-]{1,60}?)"
_END = r"(?=\s*(?:[.!?,;]|$| and | but | because | since | so ))"


@dataclass(frozen=True)
class FactRule:
    category: str
    key: str
    pattern: re.Pattern[str]
    template: str
    importance: float
    confidence: float


def _rule(
    category: str, key: str, cue: str, value: str, template: str, importance: float = 0.8, confidence: float = 0.9
) -> FactRule:
    """`cue` matches in any case; `value` keeps its own case rules (names are capitalised)."""
    return FactRule(category, key, re.compile(f"(?i:{cue})" + value), template, importance, confidence)


FACT_RULES: tuple[FactRule, ...] = (
    _rule(
        "identity",
        "name",
        r"\b(?:my name is|my name's|call me|i am called|i'm called)\s+",
        _NAME,
        "User's name is {value}",
        0.9,
    ),
    _rule(
        "location",
        "city",
        r"\b(?:moved|relocated|moving|relocating)\s+(?:from\s+[A-Z][\w\s.'-]*?\s+)?to\s+",
        _PLACE,
        "User lives in {value}",
        0.85,
    ),
    _rule(
        "location",
        "city",
        r"\bi (?:live|reside|am based|'m based|am living|'m living)\s+in\s+",
        _PLACE,
        "User lives in {value}",
        0.85,
    ),
    _rule("location", "hometown", r"\bi(?: am|'m) (?:originally )?from\s+", _PLACE, "User is from {value}", 0.7, 0.8),
    _rule("work", "occupation", r"\bi work as (?:an? )?", _PHRASE + _END, "User works as {value}", 0.8),
    _rule(
        "work",
        "occupation",
        r"\bmy (?:job|role|occupation|profession) is (?:an? )?",
        _PHRASE + _END,
        "User works as {value}",
        0.8,
    ),
    _rule("work", "employer", r"\bi work (?:at|for)\s+", _PLACE, "User works at {value}", 0.75),
    _rule("locale", "timezone", r"\bmy time ?zone is\s+", r"(?P<value>[\w/+:-]+)", "User's timezone is {value}", 0.7),
    _rule(
        "locale",
        "timezone",
        r"\bi(?: am|'m) in (?:the )?",
        r"(?P<value>(?:UTC|GMT)[+-]?\d{0,2}|[A-Z]{2,4}T) time ?zone",
        "User's timezone is {value}",
        0.7,
    ),
    _rule(
        "locale",
        "language",
        r"\bmy (?:native|first|mother) (?:language|tongue) is\s+",
        r"(?P<value>[A-Z]\w+)",
        "User's native language is {value}",
        0.7,
    ),
    _rule(
        "locale",
        "language",
        r"\bi speak\s+",
        r"(?P<value>[A-Z]\w+(?:(?:,\s*| and )[A-Z]\w+)*)",
        "User speaks {value}",
        0.6,
        0.8,
    ),
    _rule(
        "family",
        "pet_{kind}",
        r"\bi have an? (?P<kind>dog|cat|puppy|kitten|parrot|rabbit|hamster|horse|fish)(?: named| called)\s+",
        _NAME,
        "User has a {kind} named {value}",
        0.7,
    ),
    _rule(
        "family",
        "pet_{kind}",
        r"\bmy (?P<kind>dog|cat|puppy|kitten|parrot|rabbit|hamster|horse)(?:'s name is| is named| is called|,)\s+",
        _NAME,
        "User has a {kind} named {value}",
        0.7,
    ),
    _rule(
        "family",
        "spouse",
        r"\bmy (?:wife|husband|partner|spouse)(?:'s name is| is named| is called|,)\s+",
        _NAME,
        "User's partner is {value}",
        0.75,
    ),
    _rule(
        "family",
        "children",
        r"\bi have ",
        r"(?P<value>\w+) (?:kids|children|sons|daughters)\b",
        "User has {value} children",
        0.7,
    ),
)

PREFERENCE_CUES = re.compile(
    r"\b(?:i (?:really |really don't |don't |do not |absolutely |)(?:prefer|like|love|enjoy|hate|dislike|can't stand|adore)"
    r"|i (?:don't|do not|never) want|i(?: would|'d) rather|i always|i never|i usually|my (?:all[- ]time )?fav(?:ou?rite)?"
    r"|please (?:always|never|don't|do not))\b",
    re.IGNORECASE,
)
NEGATIVE_CUES = re.compile(r"\b(?:hate|dislike|can't stand|don't|do not|never)\b", re.IGNORECASE)
