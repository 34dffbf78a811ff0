"""Open questions: found at eviction when unresolved, tentatively answered later, surfaced when touched."""

from datetime import timedelta

from agents.questions import answers, question_candidates, unresolved
from schemas import EvictedChunk, MemoryCandidate, MemoryRecord, MemoryStatus, MemoryType, Role, TurnEvent
from schemas.memory import Question, QuestionState
from services.core.open_questions import touches
from services.core.textutil import content_hash
from tests.factories import turn_event


def chunk(turns: list[TurnEvent], reason: str = "session_end") -> EvictedChunk:
    return EvictedChunk(tenant_id="t", user_id="u", session_id="s", reason=reason, turns=turns, cause=["c"])


ASKED = turn_event(0, "Which visa do I need for the Japan conference trip?")
UNSURE = turn_event(1, "I'm not sure, it depends on your passport.")
ANSWERED = turn_event(1, "You need a short-term business visa for Japan.")


def test_a_question_the_assistant_could_not_answer_is_open() -> None:
    (found,) = question_candidates(chunk([ASKED, UNSURE], reason="trimmed"))
    assert found.type is MemoryType.QUESTION
    assert found.text == "Which visa do I need for the Japan conference trip?"
    assert found.question is not None
    assert found.question.state is QuestionState.OPEN
    assert {"visa", "japan", "conference"} <= set(found.question.related)
    assert found.source.event_ids == [ASKED.event_id]


def test_a_question_keeps_the_sentence_that_says_what_it_is_about() -> None:
    """ "What's the best library?" alone does not say for what; a later "I went with flask-limiter for the rate
    limiting" answers it through the lead-in's terms."""
    asked = turn_event(
        0, "The JWT login works now. Next I want to add rate limiting to /login. What's the best library?"
    )
    put_off = turn_event(1, "I'm not sure which fits best; let's come back to that once you know your traffic.")
    (found,) = question_candidates(chunk([asked, put_off]))
    assert found.text == "Next I want to add rate limiting to /login. What's the best library?"
    assert found.question is not None
    assert {"rate", "limiting", "library"} <= set(found.question.related)
    later = statement("I went with flask-limiter for the rate limiting on login.")
    record = question_record().model_copy(update={"text": found.text, "question": found.question})
    assert answers(record, later)
    # A greeting or a thanks leads nothing in; nor does another question.
    for lead in ("Thanks, that worked!", "Hi there.", "Is it free?"):
        (plain,) = question_candidates(chunk([turn_event(0, f"{lead} {ASKED.content}"), UNSURE]))
        assert plain.text == ASKED.content, lead


def test_an_answered_question_or_a_statement_is_not_open() -> None:
    assert unresolved([ASKED, ANSWERED], session_ended=True) == []
    assert unresolved([turn_event(0, "I booked the Japan trip.")], session_ended=True) == []


def test_an_unreplied_question_is_open_only_when_the_session_ended() -> None:
    """In a trimmed chunk the reply may still sit in the working window."""
    assert unresolved([ASKED], session_ended=False) == []
    assert [q for _, q in unresolved([ASKED], session_ended=True)] == [ASKED.content]


def said(*messages: tuple[Role, str]) -> list[TurnEvent]:
    """Turns with the roles given (turn_event alternates them; users often send two messages in a row)."""
    return [turn_event(i, text).model_copy(update={"role": role}) for i, (role, text) in enumerate(messages)]


def test_a_question_the_user_drops_in_a_second_message_before_the_reply_is_open() -> None:
    turns = said(
        (Role.USER, "Is rye flour worth trying in sourdough?"),
        (Role.USER, "Actually, never mind that. What temperature should the water be?"),
        (Role.ASSISTANT, "Certainly! Lukewarm water around 27 C is ideal."),
    )
    assert [q for _, q in unresolved(turns, session_ended=True)] == ["Is rye flour worth trying in sourdough?"]


def test_a_question_passed_over_for_the_users_next_one_is_open_and_one_the_reply_covers_is_not() -> None:
    skipped = said(
        (Role.USER, "Can I deduct my home office as a freelancer?"),
        (Role.USER, "When is the quarterly estimated tax payment due?"),
        (Role.ASSISTANT, "The next estimated payment is due on January 15."),
    )
    assert [q for _, q in unresolved(skipped, session_ended=True)] == ["Can I deduct my home office as a freelancer?"]
    covered = said(
        (Role.USER, "What's a good beginner deadlift weight?"),
        (Role.USER, "And how many sets should I do?"),
        (Role.ASSISTANT, "Start your deadlift with the bar or about 40 kg, and do 3 sets of 5."),
    )
    assert unresolved(covered, session_ended=True) == []


def test_a_question_the_user_settles_in_a_second_message_is_not_open() -> None:
    for settled in ("Oh wait, found it in the compose file, 5432.", "Never mind, I'll ask at the front desk."):
        turns = said(
            (Role.USER, "What port does the Postgres container listen on?"),
            (Role.USER, settled),
            (Role.ASSISTANT, "Nice, that works."),
        )
        assert unresolved(turns, session_ended=True) == [], settled


def test_a_reply_that_comes_back_to_something_later_puts_it_off() -> None:
    turns = said(
        (Role.USER, "How do I memoize a callback in React?"),
        (Role.ASSISTANT, "Let's come back to memoizing callbacks in a moment. Can you share the component code?"),
        (Role.USER, "Sure, tomorrow. Bye!"),
    )
    assert [q for _, q in unresolved(turns, session_ended=True)] == ["How do I memoize a callback in React?"]


def question_record(state: QuestionState = QuestionState.OPEN) -> MemoryRecord:
    (c,) = question_candidates(chunk([ASKED]))
    return MemoryRecord(
        id=c.candidate_id,
        tenant_id="t",
        user_id="u",
        type=MemoryType.QUESTION,
        text=c.text,
        content_hash=content_hash(c.text),
        importance=0.5,
        confidence=0.6,
        status=MemoryStatus.ACTIVE,
        observed_at=c.observed_at,
        created_at=c.observed_at,
        updated_at=c.observed_at,
        source=c.source,
        question=Question(state=state, related=c.question.related if c.question else []),
    )


def statement(text: str, later: timedelta = timedelta(days=2)) -> MemoryCandidate:
    from agents.rules.candidates import candidates_for_turn

    turn = turn_event(0, text, start=ASKED.ts + later)
    return next(c for c in candidates_for_turn(turn) if c.type is MemoryType.EXCHANGE)


def test_a_later_statement_sharing_the_terms_tentatively_answers_it() -> None:
    q = question_record()
    assert answers(q, statement("Turns out the Japan conference visa is a short business visa."))
    assert not answers(q, statement("I had pasta for dinner."))
    assert not answers(q, statement("Do I need a Japan conference visa?"))  # another question
    assert not answers(q, statement("Japan conference visa sorted.", later=-timedelta(days=1)))
    assert not answers(question_record(QuestionState.TENTATIVELY_RESOLVED), statement("Japan visa done."))


def test_a_deferred_question_is_still_answered_but_no_longer_surfaced() -> None:
    deferred = question_record(QuestionState.DEFERRED)
    assert answers(deferred, statement("Turns out the Japan conference visa is a short business visa."))
    assert not touches(deferred, "what about the Japan conference?", [["Japan"]])
    assert not touches(question_record(QuestionState.TENTATIVELY_RESOLVED), "the Japan conference visa?", [])


def test_a_recall_touches_a_question_through_its_query_or_what_it_returned() -> None:
    q = question_record()
    assert touches(q, "what about the Japan conference?", [])
    assert touches(q, "travel plans", [["Japan"]])
    assert not touches(q, "favourite pasta recipe", [["Rome"]])
