"""Open questions on the labelled set: precision and recall floors, and what the issue asked for by name.

The set (tests/unit/data/open_questions.jsonl; tests/bench/questions.py
prints the table) holds 237 assistant-style conversations with 119 labelled
open questions. The detector finds 113 of them with one false alarm
(precision 0.991, recall 0.950); the literal "don't know" rule it replaced
scored 0.833 / 0.128 on the first 163 conversations. Each late split was
measured once before the rules learned from it: heldout4 (a user's second
message before the reply) recall 0.167, then 0.833; heldout5 (declines,
"not certain", "we can brainstorm that later") 0.556; heldout6, written
after heldout5's rules were frozen, 0.818 with three false alarms on
hedged answers ("I'm not positive about prices, but …"), then 1.000 with
none; support (a support desk handing questions on: "I've escalated this
to billing") 0.286, then 1.000; support2, written once those rules were
frozen, 0.333, then 0.833. The floors leave room for two or three more errors either way (each
costs about 0.01), so a deliberate trade between the two passes and
anything like the old recall fails.
"""

from __future__ import annotations

import importlib
import re
import time
from typing import Any

import pytest

from agents import questions
from agents.questions import question_candidates
from schemas import EvictedChunk
from services.core.textutil import stable_id
from tests.bench.questions import evaluate, load
from tests.factories import turn_event
from tests.pathological import fill, pathological_turns

sre_parse: Any = importlib.import_module("re._parser")
sre: Any = importlib.import_module("re._constants")
PRECISION_FLOOR = 0.95
RECALL_FLOOR = 0.90
# The kinds the literal rule missed: put off, turned away from, asked back about and dropped, dropped by the user.
NEW_KINDS = ("deferred", "deflected", "clarify_unanswered", "user_dropped")
CASES = load()


def chunk(texts: list[str], reason: str = "session_end") -> EvictedChunk:
    """User and assistant turns, alternating from the user's."""
    turns = [turn_event(i, t) for i, t in enumerate(texts)]
    return EvictedChunk(tenant_id="t", user_id="u", session_id="s", reason=reason, turns=turns, cause=["e0"])


def open_in(texts: list[str], reason: str = "session_end") -> list[str]:
    return [c.text for c in question_candidates(chunk(texts, reason))]


def test_precision_and_recall_on_the_labelled_set_stay_above_their_floors() -> None:
    score = evaluate(CASES)
    assert len(CASES) >= 60
    assert score.precision >= PRECISION_FLOOR, score.false_alarms
    assert score.recall >= RECALL_FLOOR, score.misses


def test_questions_put_off_turned_away_from_or_dropped_are_found() -> None:
    score = evaluate([c for c in CASES if c.kind in NEW_KINDS])
    assert score.true_positives >= 30
    assert score.recall >= 0.85, score.misses


@pytest.mark.parametrize("kind", ["answered", "answered_filler", "small_talk", "clarify_answered", "self_answered"])
def test_answers_padded_with_filler_small_talk_and_answered_questions_stay_closed(kind: str) -> None:
    cases = [c for c in CASES if c.kind == kind]
    assert cases
    assert evaluate(cases).false_alarms == []


def test_the_issues_examples() -> None:
    asked = "Should I rent a car for the Algarve part?"
    assert open_in([asked, "Great question! Let's come back to that once we have your route. Anything else?"]) == [
        asked
    ]
    dropped = "Can I bring my dog to the Airbnb in Sintra?"
    assert open_in(
        [f"{dropped} Actually, never mind — what about hotels near the beach in Cascais?", "Try the Farol Hotel."]
    ) == [dropped]
    assert open_in([asked, "Happy to help! Renting a car is the easiest way around the Algarve. Anything else?"]) == []


def test_a_refusal_leaves_the_question_open_and_a_hedged_answer_closes_it() -> None:
    asked = "Should I sue my landlord over the deposit?"
    assert open_in([asked, "I'm not a lawyer, so I can't advise on that. A solicitor could review your case."]) == [
        asked
    ]
    priced = "How many calories does a croissant have?"
    hedged = "I can't give you an exact figure, but a typical croissant has about 250 calories."
    assert open_in([priced, hedged]) == []
    # Lacking the user's own data is no hedge: a typical figure does not answer for their gym.
    gym = "What time does my gym close on Sundays?"
    assert open_in([gym, "I don't have your gym's hours, but most close around 8 pm on Sundays."]) == [gym]


def test_putting_off_the_next_subject_after_an_answer_leaves_nothing_open() -> None:
    asked = "Can I get from Rome to Florence by train?"
    answered = "Yes, the Frecciarossa takes 95 minutes. We can plan the Florence museums later!"
    assert open_in([asked, answered]) == []
    named = "What's a good name for my bakery?"
    assert open_in([named, "We can brainstorm names later! First, tell me about your menu.", "Sourdough."]) == [named]


def test_a_question_handed_on_to_someone_else_is_open_and_an_answer_with_a_follow_up_is_not() -> None:
    charged = "Why was I charged twice for October?"
    assert open_in(
        [charged, "I'm sorry about that. I've escalated this to our billing team, who will get back to you."]
    ) == [charged]
    fixed = "Is the outage in my area going to be fixed today?"
    assert open_in([fixed, "Our engineers are on site. We'll text you the moment service is restored."]) == [fixed]
    # The answer came first; the follow-up only confirms it.
    transfer = "How long does a bank transfer take to arrive?"
    assert (
        open_in([transfer, "Transfers between UK banks usually arrive within 2 hours. We'll notify you when it lands."])
        == []
    )


def test_a_question_asked_back_about_is_open_only_once_the_session_ends_without_an_answer() -> None:
    """A trimmed chunk may end before the user's answer, which the window still holds."""
    asked = ["Which credit card is best for travel rewards?", "Great question! Which airline do you fly most often?"]
    assert open_in(asked, reason="session_end") == [asked[0]]
    assert open_in(asked, reason="trimmed") == []
    answered = [*asked, "Mostly Lufthansa.", "Then the Miles & More credit card earns the most travel rewards."]
    assert open_in(answered, reason="trimmed") == []


def test_a_reply_that_builds_on_the_users_answer_to_a_question_back_closes_the_question() -> None:
    """The usual assistant exchange: the final reply names nothing of the request, only what the user said."""
    asked = ["Can you help me plan a trip to Japan?", "Of course! When are you going?", "In April, for two weeks."]
    assert open_in([*asked, "April is cherry blossom season: spend four days in Tokyo and three in Kyoto."]) == []
    assert open_in([*asked, "Great, anything else?"]) == [asked[0]]
    # A user who answers with a new question of their own moved on: the reply to that says nothing of this one.
    moved_on = [asked[0], asked[1], "April, I think. Actually, what's the best travel insurance for April?"]
    assert open_in([*moved_on, "World Nomads covers most April travel."]) == [asked[0]]


def test_a_question_put_off_and_answered_later_in_the_chunk_is_not_open() -> None:
    asked = "Do I need a visa for Vietnam?"
    put_off = [asked, "Let's come back to that after the route. Which cities?", "Hanoi and Hoi An."]
    assert open_in([*put_off, "Great route."]) == [asked]
    assert open_in([*put_off, "About the visa for Vietnam: most people can get an e-visa online."]) == []


def test_candidate_ids_stay_those_of_the_turn_and_the_text() -> None:
    case = next(c for c in CASES if c.kind == "deferred")
    first, again = question_candidates(case.chunk), question_candidates(case.chunk)
    assert [c.candidate_id for c in first] == [c.candidate_id for c in again]
    ((found, turn),) = [(c, t) for c in first for t in case.chunk.turns if t.event_id in c.source.event_ids]
    assert found.candidate_id == stable_id("t", "u", "question", turn.event_id, found.text)


def _repeats(tree: Any) -> list[int]:
    """The upper bound of every repetition in a parsed pattern, nested ones included."""
    out: list[int] = []
    for op, arg in tree:
        if op in (sre.MAX_REPEAT, sre.MIN_REPEAT, sre.POSSESSIVE_REPEAT):
            out += [arg[1], *_repeats(arg[2])]
        elif op in (sre.SUBPATTERN, sre.ATOMIC_GROUP):
            out += _repeats(arg[-1])
        elif op in (sre.ASSERT, sre.ASSERT_NOT):
            out += _repeats(arg[1])
        elif op is sre.BRANCH:
            for branch in arg[1]:
                out += _repeats(branch)
    return out


PATTERNS = {name: p for name, p in vars(questions).items() if isinstance(p, re.Pattern)}


@pytest.mark.parametrize("name", sorted(PATTERNS))
def test_every_pattern_repeats_a_bounded_number_of_times(name: str) -> None:
    """One match attempt then costs a constant, so a search is linear in the text (agents/rules/patterns.py)."""
    bounds = _repeats(sre_parse.parse(PATTERNS[name].pattern, PATTERNS[name].flags))
    assert [b for b in bounds if b == sre.MAXREPEAT or b > 100] == []


def test_a_chunk_of_maximal_turns_full_of_questions_is_read_in_linear_time() -> None:
    """Each question reads a bounded number of turns, each turn's terms once: well under a second of CPU."""
    texts = [
        fill("Which visa do I need for the Japan conference? Actually, never mind. "),
        fill("Let's come back to that, Kyoto Station is busy. Do you have a passport? "),
        fill("Which Alpha Bravo charlie delta? "),
        fill("Yes, Kilo Lima mike november. Which one? "),
        *pathological_turns().values(),
    ][:14]
    started = time.process_time()
    found = question_candidates(chunk(texts))
    spent = time.process_time() - started
    assert found
    assert spent < 2.0, spent
