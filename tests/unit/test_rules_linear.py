"""No turn can stall rule extraction: bounded patterns, linear time at the content limit, a time budget.

Times are CPU seconds of this process (time.process_time), so a busy
machine does not fail them; the bounds are a few times the worst measured
(tests/bench/rules_worst.py sweeps every pathological turn), while the
patterns these tests replaced took minutes to hours on the same turns.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from prometheus_client import REGISTRY

from agents.rules.candidates import candidates_for_turn
from agents.rules.extract import (
    MAX_CLAUSE_CHARS,
    MAX_PREFERENCES,
    WINDOW_CHARS,
    WINDOW_OVERLAP,
    clauses,
    extract,
    extract_preferences,
    first_match,
)
from agents.rules.patterns import FACT_RULES, NEGATIVE_CUES, PREFERENCE_CUES
from tests.bench.rules_worst import rule_patterns
from tests.factories import turn_event
from tests.pathological import CONTENT_LIMIT, CUES, fill, pathological_turns

# The regex compiler's own parser (re._parser, untyped): what the engine will run, repetitions and all.
sre_parse: Any = importlib.import_module("re._parser")
sre: Any = importlib.import_module("re._constants")
PATTERN_SECONDS = 0.25  # one pattern's findall over one turn at the limit: measured worst ~0.1
EXTRACT_SECONDS = 0.5  # the whole extract() without its budget: measured worst ~0.2
RULE_PATTERNS = {
    name: p for name, p in rule_patterns().items() if "/" in name or name in ("PREFERENCE_CUES", "NEGATIVE_CUES")
}
# Each cue repeated over a third of the turn, then spaces: many starts, each scanning one long run
# (a location rule took hours on one of these), and each cue followed by a run that never completes it.
WORST = {name: text for name, text in pathological_turns().items() if name.endswith(("then spaces", "then ' '"))}


def cpu_seconds(call: Callable[[], Any]) -> float:
    started = time.process_time()
    call()
    return time.process_time() - started


def _repeats(tree: Any) -> Iterator[tuple[int, int]]:
    """(min, max) of every repetition in a parsed pattern, nested ones included."""
    for op, arg in tree:
        if op in (sre.MAX_REPEAT, sre.MIN_REPEAT, sre.POSSESSIVE_REPEAT):
            yield arg[0], arg[1]
            yield from _repeats(arg[2])
        elif op in (sre.SUBPATTERN, sre.ATOMIC_GROUP):
            yield from _repeats(arg[-1])
        elif op in (sre.ASSERT, sre.ASSERT_NOT):
            yield from _repeats(arg[1])
        elif op is sre.BRANCH:
            for branch in arg[1]:
                yield from _repeats(branch)


@pytest.mark.parametrize("name", sorted(RULE_PATTERNS))
def test_every_rule_pattern_repeats_a_bounded_number_of_times(name: str) -> None:
    """A match attempt then costs a constant, so a search is linear in the turn however it is built."""
    tree = sre_parse.parse(RULE_PATTERNS[name].pattern, RULE_PATTERNS[name].flags)
    unbounded = [r for r in _repeats(tree) if r[1] == sre.MAXREPEAT or r[1] > 100]
    assert unbounded == []


def _lookaheads(tree: Any) -> Iterator[Any]:
    """Every lookahead's subpattern, positive or negative, nested ones included: what a match reads past its end."""
    for op, arg in tree:
        if op in (sre.ASSERT, sre.ASSERT_NOT) and arg[0] == 1:
            yield arg[1]
        for sub in arg if isinstance(arg, tuple | list) else ():
            if isinstance(sub, sre_parse.SubPattern):
                yield from _lookaheads(sub)
            elif isinstance(sub, list):
                for branch in sub:
                    if isinstance(branch, sre_parse.SubPattern):
                        yield from _lookaheads(branch)


@pytest.mark.parametrize("rule", FACT_RULES, ids=lambda r: f"{r.category}/{r.key}")
def test_a_window_overlap_holds_any_match_and_what_its_lookaheads_read(rule: Any) -> None:
    tree = sre_parse.parse(rule.pattern.pattern, rule.pattern.flags)
    reads_past = max((a.getwidth()[1] for a in _lookaheads(tree)), default=0)
    assert tree.getwidth()[1] + reads_past + 1 < WINDOW_OVERLAP  # + 1: a trailing \b reads one more


_MATCHES = (
    "My name is Ana Lopez.",
    "I moved from New York after ten years to Berlin, Germany and",
    "I speak English, Spanish, French and German",
    "I work as a data engineer at night because",
    "I have two kids",
)


@pytest.mark.parametrize("said", _MATCHES)
def test_windows_find_what_one_search_finds_at_every_window_boundary(said: str) -> None:
    for shift in range(-len(said) - 2, 3):
        text = "x" * (WINDOW_CHARS + shift) + " " + said + " and more " * 40
        for rule in FACT_RULES:
            whole, windowed = rule.pattern.search(text), first_match(rule.pattern, text)
            assert (whole and whole.span(), whole and whole.groupdict()) == (
                windowed and windowed.span(),
                windowed and windowed.groupdict(),
            )


@settings(max_examples=40, deadline=None)
@given(parts=st.lists(st.sampled_from((*_MATCHES, "x" * 1500, "Aa " * 300, " " * 700, "word. ")), max_size=12))
def test_windows_find_what_one_search_finds(parts: list[str]) -> None:
    text = " ".join(parts)
    for rule in FACT_RULES:
        whole, windowed = rule.pattern.search(text), first_match(rule.pattern, text)
        assert (whole and whole.span()) == (windowed and windowed.span())


@pytest.mark.parametrize("name", sorted(WORST))
def test_every_pattern_is_fast_on_the_worst_turns_at_the_content_limit(name: str) -> None:
    text = WORST[name]
    assert len(text.encode()) <= CONTENT_LIMIT
    seconds = {name: cpu_seconds(partial(pattern.findall, text)) for name, pattern in rule_patterns().items()}
    slow = {name: s for name, s in seconds.items() if s > PATTERN_SECONDS}
    assert slow == {}


@pytest.mark.parametrize("name", sorted(WORST))
def test_extract_is_fast_on_the_worst_turns_without_a_budget(name: str) -> None:
    assert cpu_seconds(lambda: extract(WORST[name], budget=None)) < EXTRACT_SECONDS


# Pieces of cues, values and separators; a unit of a few of them is repeated up to the limit.
_TOKENS = (
    "I |i |live |in |moved |from |to |Pune |Aa|a| |  |\n|.|,|!?|-|'|1|my |name |is |work |as |speak |English"
    "| and |have |love |東京"
).split("|")


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    unit=st.lists(st.sampled_from(_TOKENS), min_size=1, max_size=6).map("".join),
    prefix=st.sampled_from(("", "I moved from Pune ", "my job is a ", "I live in ", "I speak ")),
)
@example(unit=" ", prefix="I moved from Pune ")  # quadratic in the old location rule: ~40 s
@example(unit="  ", prefix="my job is a ")
def test_any_repeated_unit_at_the_content_limit_extracts_in_bounded_time(unit: str, prefix: str) -> None:
    text = fill(unit, prefix=prefix)
    assert cpu_seconds(lambda: extract(text, budget=None)) < EXTRACT_SECONDS


def test_the_budget_stops_extraction_and_is_counted() -> None:
    counted = REGISTRY.get_sample_value("memstream_rules_stopped_total", {"reason": "budget"}) or 0.0
    text = "My name is Ana. I love jazz."
    assert len(extract(text)) == 2
    assert extract(text, budget=0.0) == []
    assert REGISTRY.get_sample_value("memstream_rules_stopped_total", {"reason": "budget"}) == counted + 1


def test_a_turn_yields_each_preference_once_and_at_most_max_preferences() -> None:
    assert len(extract_preferences("I love jazz. " * 1000)) == 1
    many = " ".join(f"I love jazz number {i}." for i in range(5 * MAX_PREFERENCES))
    found = extract_preferences(many)
    assert [p.text for p in found] == [f"User preference: I love jazz number {i}." for i in range(MAX_PREFERENCES)]


def test_a_run_on_sentence_is_read_in_bounded_clauses_cut_at_spaces() -> None:
    text = "we walked for hours " * 200 + "and I love the mountains in autumn " + "and then some " * 100
    parts = clauses(text)
    assert all(len(p) <= MAX_CLAUSE_CHARS for p in parts)
    assert " ".join(parts) == text.strip()
    (found,) = extract_preferences(text)
    assert "I love the mountains" in found.text
    assert len(found.text) < MAX_CLAUSE_CHARS + 20


def test_values_are_words_not_runs_of_letters() -> None:
    """A 'word' longer than any name is no value; a name stays whole, never cut to a prefix."""
    assert extract("I live in " + "A" * 5000) == []
    assert [f.value for f in extract("My name is Ana " + "L" * 5000)] == ["Ana"]


def test_candidates_for_a_maximal_turn_stay_few() -> None:
    out = candidates_for_turn(turn_event(0, fill("I love jazz. I live in Pune. ")))
    assert len(out) == 3  # the fact, the preference, the exchange


def test_location_rule_keeps_a_long_from_phrase() -> None:
    found = extract("I moved from New York after living there for ten years to Berlin.")
    assert [(f.key_name, f.value) for f in found] == [("city", "Berlin")]


def test_the_checks_cover_every_rule() -> None:
    assert set(RULE_PATTERNS.values()) == {*(r.pattern for r in FACT_RULES), PREFERENCE_CUES, NEGATIVE_CUES}
    assert len(WORST) == 2 * len(CUES)
