import time

import pytest

from agents.rules.candidates import CONTEXT_MAX_CHARS, candidates_for_turn
from agents.rules.extract import extract, extract_facts, extract_preferences
from schemas import MemoryType, Role, TurnEvent


def facts(text: str) -> dict[str, str | None]:
    return {f"{f.category}/{f.key_name}": f.value for f in extract_facts(text)}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Hi, my name is Ana Lopez.", {"identity/name": "Ana Lopez"}),
        ("I live in Pune", {"location/city": "Pune"}),
        ("I moved from Pune to Berlin last month.", {"location/city": "Berlin"}),
        ("I work as a data engineer at night", {"work/occupation": "data engineer at night"}),
        ("My job is nurse.", {"work/occupation": "nurse"}),
        ("my timezone is Europe/Berlin", {"locale/timezone": "Europe/Berlin"}),
        ("I speak Spanish and English", {"locale/language": "Spanish and English"}),
        ("I have a dog named Rex", {"family/pet_dog": "Rex"}),
        ("My wife's name is Maria", {"family/spouse": "Maria"}),
        ("I have two kids", {"family/children": "two"}),
        # Capitals of any script: these named nothing while names had to start A-Z.
        ("My name is Élodie Durand.", {"identity/name": "Élodie Durand"}),
        ("call me Łukasz", {"identity/name": "Łukasz"}),
        ("I live in Île-de-France", {"location/city": "Île-de-France"}),
        ("I moved from Kraków to Øvre Eiker last year.", {"location/city": "Øvre Eiker"}),
        # How a support chat opens.
        ("Hi, I'm Dana. I've been charged twice.", {"identity/name": "Dana"}),
        ("Hello, this is Sam Lee here, about my order.", {"identity/name": "Sam Lee"}),
        ("It's Dana again. Still no word on the refund.", {"identity/name": "Dana"}),
    ],
)
def test_profile_facts(text: str, expected: dict[str, str]) -> None:
    assert facts(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "What is the weather in Paris?",
        "The city of Pune is nice",
        "i live in a small flat",
        "We talked about dogs.",
        "Hi, I'm American and live abroad.",
        "Hi, I'm looking for a router.",
        "It's Monday again.",
        "It's Tuesday and I'm tired.",
    ],
)
def test_no_fact_where_none_is_stated(text: str) -> None:
    assert facts(text) == {}


@pytest.mark.parametrize(
    "text",
    [
        "I prefer dark roast coffee.",
        "I really like hiking on weekends.",
        "I love jazz",
        "I hate cilantro",
        "I don't want emails before 9am.",
        "I always fly window seat.",
        "I never eat pork.",
        "I never liked olives.",
        # What the user cannot or will not eat.
        "I'm allergic to peanuts.",
        "I'm lactose intolerant, so no milk please.",
        "I am vegetarian.",
        "I can't eat gluten.",
        "I keep kosher.",
        "I never need sugar in my tea.",
        "My favorite band is Muse.",
        "I love 東京.",
        "I love crème brûlée",
    ],
)
def test_preference_hits(text: str) -> None:
    found = extract_preferences(text)
    assert len(found) == 1
    assert found[0].type is MemoryType.PREFERENCE
    assert text.rstrip(".") in found[0].text


@pytest.mark.parametrize(
    "text",
    [
        "Do you like jazz?",
        "The weather is nice today.",
        "She prefers tea.",
        "I love it!",
        "Yeah, I love to.",
        "Melanie: I love it.",
        "I really like that one.",
        # What happened, not a habit.
        "I never asked for paper bills.",
        "I never got the refund email.",
        "I always thought tofu was bland.",
        "I'm not allergic to anything.",
        "My son is allergic to eggs.",
        "I can't eat that much.",
        # Advice between friends, not how to answer.
        "Never give up!",
        "Always be yourself.",
    ],
)
def test_preference_misses(text: str) -> None:
    assert extract_preferences(text) == []


def test_negative_preference_is_marked() -> None:
    (found,) = extract_preferences("I can't stand loud music.")
    assert found.category == "dislike"
    (allergy,) = extract_preferences("I'm severely allergic to shellfish.")
    assert allergy.category == "constraint"
    assert allergy.importance > extract_preferences("I love jazz")[0].importance


def test_a_sentence_joining_two_things_keeps_each_apart() -> None:
    """ "I live in Berlin and I'm vegetarian": the diet alone is the preference, so the city it repeats cannot
    outlive a move in every recall."""
    assert [(p.category, p.text) for p in extract_preferences("I live in Berlin and I'm vegetarian.")] == [
        ("constraint", "User preference: I'm vegetarian.")
    ]
    assert [p.category for p in extract_preferences("I love jazz but I hate techno.")] == ["like", "dislike"]
    assert [p.text for p in extract_preferences("I love rock and roll.")] == ["User preference: I love rock and roll."]


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("I'm no longer vegetarian, I eat fish now.", "vegetarian"),
        ("I'm not vegan any more!", "vegan"),
        ("Please forget that I like jazz, I'm over it.", "jazz"),
        ("I used to love techno.", "techno"),
        ("I used to be vegan.", "vegan"),
        ("I used to love spending time in the studio.", "spending time in the studio"),
        ("I no longer like jazz music.", "jazz music"),
        ("I'm no longer interested in football.", "interested in football"),
    ],
)
def test_a_preference_taken_back_names_what_it_takes_back(text: str, value: str) -> None:
    (found,) = extract_preferences(text)
    assert (found.category, found.value) == ("retraction", value)


def test_what_is_not_taken_back() -> None:
    assert extract_preferences("I'm not sure anymore.") == []  # a state, not something liked
    assert extract_preferences("I'm not vegan.") == []  # "not" alone is no change
    assert extract_preferences("I used to be scared of dogs.") == []  # past, and no preference
    (diet,) = extract_preferences("I don't eat meat anymore.")
    assert diet.category == "constraint"  # a diet said in the negative is a diet


def test_a_spelling_correction_is_a_new_name() -> None:
    assert [(f.key_name, f.value) for f in extract_facts("Actually my name is spelled Jon, not John.")] == [
        ("name", "Jon")
    ]


@pytest.mark.parametrize(
    ("text", "category"),
    [
        ("I'm allergic to peanuts and my partner is vegetarian.", "constraint"),
        ("I can't eat gluten either, turns out.", "constraint"),
        ("I'm vegan.", "constraint"),
        ("Please never use emojis.", "instruction"),
        ("Please don't call me buddy.", "instruction"),
        ("Always reply in French, thanks.", "instruction"),
        ("From now on, keep answers short.", "instruction"),
        ("From now on please call me Sam.", "instruction"),
        ("I love jazz.", "like"),
        ("I never eat pork.", "dislike"),
    ],
)
def test_standing_preferences_are_told_apart(text: str, category: str) -> None:
    """A diet or an instruction holds whatever the user asks: recall pins it (schemas.memory.STANDING_CATEGORIES)."""
    (found,) = extract_preferences(text)
    assert found.category == category


@pytest.mark.parametrize(
    "text",
    [
        "Never mind, always use the first one.",  # an answer about this task
        "I'll be working remotely from now on.",  # news, not how to answer
        "Don't add comments to this function.",  # said of one task
    ],
)
def test_instructions_for_one_task_are_not_standing(text: str) -> None:
    assert [p.category for p in extract_preferences(text)] in ([], ["like"], ["dislike"])


def test_well_under_10ms_per_turn() -> None:
    text = "Yesterday I went to the store, and I really like the new bakery there. My name is Sam. " * 3
    started = time.perf_counter()
    for _ in range(200):
        extract(text)
    assert (time.perf_counter() - started) / 200 < 0.010


def _turn(role: Role, content: str, event_id: str = "e1") -> TurnEvent:
    return TurnEvent.model_validate(
        {
            "event_id": event_id,
            "tenant_id": "t",
            "user_id": "u",
            "session_id": "s",
            "turn_index": 0,
            "role": role,
            "content": content,
            "ts": "2026-01-01T00:00:00Z",
            "metadata": {"k": 1},
        }
    )


def test_user_turn_yields_rule_hits_plus_exchange_with_provenance() -> None:
    out = candidates_for_turn(_turn(Role.USER, "I live in Pune. I love tea."))
    assert [c.type for c in out] == [MemoryType.FACT, MemoryType.PREFERENCE, MemoryType.EXCHANGE]
    assert all(c.source.event_ids == ["e1"] and c.source.metadata == [{"k": 1}] for c in out)


def test_candidate_ids_are_deterministic_and_facts_dedupe_across_turns() -> None:
    a = candidates_for_turn(_turn(Role.USER, "I live in Pune", "e1"))
    b = candidates_for_turn(_turn(Role.USER, "I live in Pune", "e2"))
    assert a[0].candidate_id == b[0].candidate_id  # same fact, same id
    assert a[-1].candidate_id != b[-1].candidate_id  # distinct exchanges
    assert candidates_for_turn(_turn(Role.USER, "I live in Pune", "e1")) == a


def test_assistant_turns_produce_nothing() -> None:
    assert candidates_for_turn(_turn(Role.ASSISTANT, "I love helping")) == []


def test_only_the_exchange_carries_the_turns_before_it_as_context_capped_and_without_blanks() -> None:
    before = [_turn(Role.ASSISTANT, "  Where do you live?  ", "e0"), _turn(Role.USER, "   ", "eb")]
    long = _turn(Role.USER, "x" * 5000 + " the end", "ea")
    out = candidates_for_turn(_turn(Role.USER, "I live in Pune"), [long, *before])
    assert [(c.type, c.context) for c in out] == [
        (MemoryType.FACT, []),
        (MemoryType.EXCHANGE, [("x" * 5000 + " the end")[-CONTEXT_MAX_CHARS:], "Where do you live?"]),
    ]
    assert out[0].candidate_id == candidates_for_turn(_turn(Role.USER, "I live in Pune"))[0].candidate_id
