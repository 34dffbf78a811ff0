"""Turns built to make regular expressions backtrack, each filled up to the content limit.

Shared by the extraction fuzz tests (tests/unit/test_rules_linear.py) and the
measurement that reports extraction time per turn before and after a change
to the rules (tests/bench/rules_worst.py). Each text repeats a unit that
starts, but never finishes, a rule's match: a cue with no value after it, a
long run of what a quantifier accepts, a run that two quantifiers share.
"""

from __future__ import annotations

from services.core.config import Settings

# What parse_chat_event lets through: content of at most this many UTF-8 bytes.
CONTENT_LIMIT = Settings.model_fields["max_content_bytes"].default

# Cue phrases of every rule (agents/rules/patterns.py), with and without what follows them.
CUES = (
    "my name is ",
    "call me ",
    "I moved from ",
    "moved from Pune ",
    "relocating to ",
    "I live in ",
    "I'm based in ",
    "I am originally from ",
    "I work as a ",
    "my job is a ",
    "I work at ",
    "my time zone is ",
    "I'm in the ",
    "my native language is ",
    "I speak ",
    "I have a dog named ",
    "my cat is called ",
    "my wife's name is ",
    "I have ",
    "I really don't like ",
    "please never ",
    "my all-time favourite ",
)

# One repeated unit each: every quantifier in the rules accepts some of them.
_UNITS = (
    "word ",
    " ",
    "\t \n",
    "Aa ",
    "Berlin ",
    "Ana Lopez, ",
    "1",
    "12 ",
    ".",
    ", ",
    "!? ",
    "a.b-c'd ",
    "x",
    "X",
    "\n",
    "I ",
    "to ",
    "from Pune to ",
    "moved from A ",
    "moved to Aa, Bb, Cc, Dd, ",
    "I speak English, ",
    "I speak English and ",
    "I work as a nurse and ",
    "I love jazz. ",
    "I love jazz ",
    "Melanie: I love it. ",
    "UTC+1 ",
    "東京 ",
    "é",
)


def fill(unit: str, limit: int = CONTENT_LIMIT, *, prefix: str = "", suffix: str = "") -> str:
    """`prefix`, `unit` repeated, `suffix`: as long as fits in `limit` UTF-8 bytes."""
    room = limit - len(prefix.encode()) - len(suffix.encode())
    return prefix + unit * max(room // len(unit.encode()), 0) + suffix


def pathological_turns(limit: int = CONTENT_LIMIT) -> dict[str, str]:
    """Named texts of at most `limit` bytes: repeated units, each cue repeated, each cue then a long run."""
    out: dict[str, str] = {}
    for unit in _UNITS:
        out[f"repeat {unit!r}"] = fill(unit, limit)
    for cue in CUES:
        out[f"repeat cue {cue!r}"] = fill(cue, limit)
        for run in (" ", "a", "A", "Aa ", "a ", "1", ".", "x-"):
            # The run never completes a match: a lowercase word or punctuation ends it.
            out[f"cue {cue!r} then {run!r}"] = fill(run, limit, prefix=cue, suffix=" ~")
        # Many starts that each scan one long run: cubic for a pattern that backtracks quadratically over it.
        starts = cue * (limit // 3 // len(cue.encode()))
        out[f"cue {cue!r} repeated, then spaces"] = fill(" ", limit, prefix=starts, suffix=" ~")
    return out
