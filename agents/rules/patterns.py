r"""The rule table: what a user says and the memory it becomes.

Kept apart from the matching code so adding a rule is one line here.

Every repetition is bounded (`{m,n}`, never `*` or `+`): one match attempt
costs at most a constant however long the turn, so a search over a whole turn
is linear in its length. Unbounded repetitions that accept the same characters
side by side (`[\w\s]*?\s+`) let one turn of "moved from A " then spaces run
for hours. tests/unit/test_rules_linear.py checks the bound on every pattern.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from schemas.memory import CONSTRAINT, INSTRUCTION
from services.core.textutil import UPPER, content_words

# A value's word: at most 41 characters, and a longer run is no word at all (not cut to a prefix).
_NAME_WORD = rf"{UPPER}[\w'-]{{0,40}}(?![\w'-])"
_PLACE_WORD = rf"{UPPER}[\w.'-]{{0,40}}(?![\w.'-])"
_NAME = rf"(?P<value>{_NAME_WORD}(?: {_NAME_WORD})?)"
_PLACE = rf"(?P<value>{_PLACE_WORD}(?:[ ,]{{1,3}}{_PLACE_WORD}){{0,3}})"
_PHRASE = r"(?P<value>[\w][\w\s'&/+.-]{1,60}?)"
_END = r"(?=\s{0,5}(?:[.!?,;]|$| and | but | because | since | so ))"
# What follows "Hi, I'm" with a capital yet is no name.
_NOT_A_NAME = (
    r"(?:American|British|English|Canadian|Australian|Indian|Chinese|Japanese|German|French|Spanish|Italian|Mexican"
    r"|Irish|Scottish|Welsh|Dutch|Jewish|Muslim|Christian|Catholic|Vegan|Vegetarian|Back|Sorry|Fine|Good|Okay|OK"
    r"|Monday|Tuesday|Wednesday|Thursday|Friday|Saturday|Sunday|January|February|March|April|May|June|July|August"
    r"|September|October|November|December|Christmas|Easter|Halloween)"
)
# Whitespace between words of a cue, as typed: a few characters.
_S = r"\s{1,5}"


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
        # "Actually my name is spelled Jon, not John": a correction supersedes the name as any new value does.
        rf"\b(?:my name is|my name's|call me|i am called|i'm called)(?:{_S}(?:spelled|spelt))?{_S}",
        _NAME,
        "User's name is {value}",
        0.9,
    ),
    _rule(
        "identity",
        "name",
        # How users open a chat with a support desk: "Hi, I'm Dana.", "Hello, this is Sam Lee here", "It's Dana again".
        rf"\b(?:hi|hello|hey|good (?:morning|afternoon|evening))\W{{1,3}}(?:there\W{{1,3}})?(?:i'm|i am|this is|it's)"
        rf"{_S}(?!{_NOT_A_NAME}\b)",
        rf"{_NAME}(?=\s{{0,5}}(?:[.!,;]|$| and | here\b| again\b| from\b))",
        "User's name is {value}",
        0.9,
        0.8,
    ),
    _rule(
        "identity",
        "name",
        rf"^\W{{0,3}}it's{_S}(?!{_NOT_A_NAME}\b)",
        rf"{_NAME}(?={_S}again\b)",
        "User's name is {value}",
        0.9,
        0.8,
    ),
    _rule(
        "location",
        "city",
        # "from" names up to 80 characters ("from New York after ten years to"), never the rest of the turn.
        rf"\b(?:moved|relocated|moving|relocating){_S}(?:from{_S}{UPPER}[\w\s.'-]{{0,80}}?{_S})?to{_S}",
        _PLACE,
        "User lives in {value}",
        0.85,
    ),
    _rule(
        "location",
        "city",
        rf"\bi (?:live|reside|am based|'m based|am living|'m living){_S}in{_S}",
        _PLACE,
        "User lives in {value}",
        0.85,
    ),
    _rule("location", "hometown", rf"\bi(?: am|'m) (?:originally )?from{_S}", _PLACE, "User is from {value}", 0.7, 0.8),
    _rule("work", "occupation", r"\bi work as (?:an? )?", _PHRASE + _END, "User works as {value}", 0.8),
    _rule(
        "work",
        "occupation",
        r"\bmy (?:job|role|occupation|profession) is (?:an? )?",
        _PHRASE + _END,
        "User works as {value}",
        0.8,
    ),
    _rule("work", "employer", rf"\bi work (?:at|for){_S}", _PLACE, "User works at {value}", 0.75),
    _rule(
        "locale",
        "timezone",
        rf"\bmy time ?zone is{_S}",
        r"(?P<value>[\w/+:-]{1,40})",
        "User's timezone is {value}",
        0.7,
    ),
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
        rf"\bmy (?:native|first|mother) (?:language|tongue) is{_S}",
        r"(?P<value>[A-Z]\w{1,40}(?!\w))",
        "User's native language is {value}",
        0.7,
    ),
    _rule(
        "locale",
        "language",
        rf"\bi speak{_S}",
        r"(?P<value>[A-Z]\w{1,40}(?!\w)(?:(?:,\s{0,3}| and )[A-Z]\w{1,40}(?!\w)){0,9})",
        "User speaks {value}",
        0.6,
        0.8,
    ),
    _rule(
        "family",
        "pet_{kind}",
        rf"\bi have an? (?P<kind>dog|cat|puppy|kitten|parrot|rabbit|hamster|horse|fish)(?: named| called){_S}",
        _NAME,
        "User has a {kind} named {value}",
        0.7,
    ),
    _rule(
        "family",
        "pet_{kind}",
        rf"\bmy (?P<kind>dog|cat|puppy|kitten|parrot|rabbit|hamster|horse)(?:'s name is| is named| is called|,){_S}",
        _NAME,
        "User has a {kind} named {value}",
        0.7,
    ),
    _rule(
        "family",
        "spouse",
        rf"\bmy (?:wife|husband|partner|spouse)(?:'s name is| is named| is called|,){_S}",
        _NAME,
        "User's partner is {value}",
        0.75,
    ),
    _rule(
        "family",
        "children",
        r"\bi have ",
        r"(?P<value>\w{1,20}) (?:kids|children|sons|daughters)\b",
        "User has {value} children",
        0.7,
    ),
)

# "I never asked for paper bills" tells what happened, not a habit: "always"/"never" with a past tense is no
# preference, unless the verb is one ("I never liked olives").
_EVENT = (
    r"(?! (?!(?:liked|loved|enjoyed|wanted|preferred|hated|disliked)\b)(?:\w{1,20}[^\We]ed|agreed|got|said|knew"
    r"|thought|saw|heard|made|did|had|went|told|gave|sent|bought|paid|took|came|meant|signed up)\b)"
)
_DIET = (
    r"i(?:'m| am) (?:(?:severely|very|mildly|quite|a bit|also|now) )?(?:allergic to|intolerant to|lactose intolerant"
    r"|gluten intolerant)|i(?:'m| am) (?:(?:strictly|now|also) )?(?:an? )?(?:vegetarian|vegan|pescatarian|coeliac|celiac"
    r"|diabetic)|i (?:can't|cannot|don't|do not) eat|i (?:keep|eat) (?:kosher|halal)"
)
# Verbs of answering: "Never give up!" and "Always be yourself" are advice, not instructions.
_ANSWERING = (
    r"(?:use|call|reply|answer|respond|write|address|format|mention|suggest|recommend|remind|send|include|speak)\b"
)
# How the user wants to be answered from now on: "Please never use emojis.", "Always reply in French.", "From
# now on, keep answers short." Not "Don't add comments" alone: that is said of one task.
_INSTRUCTION = (
    rf"please (?:always|never|don't|do not)|^(?:always|never) {_ANSWERING}"
    rf"|from now on,? (?:please )?(?:(?:always|never|don't|do not) )?(?:{_ANSWERING}|(?:keep|be|give|add|stop)\b)"
)
PREFERENCE_CUES = re.compile(
    r"\b(?:i (?:really |really don't |don't |do not |absolutely |)(?:prefer|like|love|enjoy|hate|dislike|can't stand|adore)"
    rf"|i (?:don't|do not|never) want|i(?: would|'d) rather|i always{_EVENT}|i never{_EVENT}|i usually"
    r"|my (?:all[- ]time )?fav(?:ou?rite)?"
    rf"|{_INSTRUCTION}"
    # What a user cannot or will not eat: an allergy or a diet is what an assistant must never forget.
    rf"|{_DIET})\b",
    re.IGNORECASE,
)


def _object(group: str) -> str:
    """One to six words taken back, to the clause's first mark, in the named `group` (a pattern's groups need
    names of their own). All of its words must be in a preference to take it back, so the whole object is more
    precise than its head: "spending time in the studio", not "spending"."""
    return rf"(?P<{group}>[^\W\d_][\w'-]*(?: (?!any ?more\b|now\b)[^\W\d_][\w'-]*){{0,5}})"


# What the user takes back: "I'm no longer vegetarian", "I don't eat meat anymore", "Please forget that I like
# jazz", "I used to love techno". "I'm not sure" takes nothing back: "not" needs "anymore".
RETRACTION_CUES = re.compile(
    r"\b(?:"
    + "|".join(
        (
            rf"i(?:'m| am) no longer (?:an? )?{_object('a')}",
            rf"i(?:'m| am) not (?:an? )?{_object('b')} any ?more",
            rf"i no longer (?:like|love|enjoy|eat|drink|want|prefer) {_object('c')}",
            rf"i (?:don't|do not) (?:like|love|enjoy|eat|drink|want) {_object('d')} any ?more",
            rf"forget (?:that |what |about )?i (?:like|love|enjoy|prefer) {_object('e')}",
            rf"i used to (?:like|love|enjoy) {_object('f')}",
            # "I used to be scared of dogs" is no diet: only a diet was "been".
            r"i used to be (?:an? )?(?P<g>vegetarian|vegan|pescatarian)",
        )
    )
    + ")",
    re.IGNORECASE,
)


# Words of a state, not of something liked: "I'm not sure anymore", "I'm no longer interested in football".
_STATES = frozenset(
    """sure certain ok okay fine able allowed going happy sad tired busy afraid interested convinced worried
    bothered keen into fan big huge music food stuff things thing""".split()
)


def taken_back(value: str) -> frozenset[str]:
    """The words a retraction's object is found by: "interested in football" -> {"football"}."""
    return frozenset(content_words(value)) - _STATES


def retracted(clause: str) -> str | None:
    """What the clause takes back ("vegetarian", "jazz music"), or None when it names nothing."""
    match = RETRACTION_CUES.search(clause)
    value = None if match is None else next(v for v in match.groupdict().values() if v)
    return value if value is not None and taken_back(value) else None


# Preferences that hold whatever the question: recall pins them in every answer (services/api/recall.py).
STANDING_CUES = {
    CONSTRAINT: re.compile(rf"\b(?:{_DIET})\b", re.IGNORECASE),
    INSTRUCTION: re.compile(rf"\b(?:{_INSTRUCTION})\b", re.IGNORECASE),
}
NEGATIVE_CUES = re.compile(
    r"\b(?:hate|dislike|can't stand|don't|do not|never|allergic|intolerant|can't eat|cannot eat)\b", re.IGNORECASE
)
