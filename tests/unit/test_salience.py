"""Episodes and topics of an assistant's chat name the subject, not the padding every reply carries."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from agents.corpus import DOCUMENTS, TURNS, corpus_counts, corpus_documents, sentence_bucket, tally, turn_buckets
from agents.questions import question_candidates
from agents.summarizer.extractive import summarize
from agents.summarizer.salience import FILLER, MIN_DOCUMENTS, NEUTRAL, Salience
from schemas import EvictedChunk, TurnEvent
from services.core.textutil import STOPWORDS
from tests.factories import turn_event

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
OPENERS = ["Happy to help with that!", "Great question!", "Absolutely, I'd be glad to help."]
CLOSERS = ["Anything else I can help you with?", "Happy to help anytime!", "Let me know if you need anything else."]
# A user planning one trip over six sessions, as the issue tells it.
TRIP = [
    ("I'm planning a trip to Kyoto in April.", "The cherry blossoms in Kyoto peak early April, so book hotels soon."),
    ("Which neighbourhood in Kyoto should I stay in?", "Gion and Higashiyama are walkable to the temples."),
    ("How do I get from Osaka airport to Kyoto?", "The Haruka express runs from Kansai airport to Kyoto station."),
    ("What temples should I see in Kyoto?", "Kinkaku-ji, Fushimi Inari and Kiyomizu-dera are the classics."),
    ("Is a rail pass worth it for my Kyoto trip?", "For Kyoto and Osaka alone a rail pass rarely pays off."),
    ("What should I pack for Kyoto in April?", "Layers and a light rain jacket: April evenings in Kyoto are cool."),
]


def session(n: int, user: str, assistant: str, rng: random.Random) -> list[TurnEvent]:
    """User, assistant, user, assistant (turn_event alternates the roles), on day `n`."""
    reply = f"{rng.choice(OPENERS)} {assistant} {rng.choice(CLOSERS)}"
    texts = [user, reply, "Thanks, that's helpful!", rng.choice(CLOSERS)]
    return [turn_event(i, text, start=T0 + timedelta(days=n)) for i, text in enumerate(texts)]


def tenant_counts(documents: list[set[int]]) -> Salience:
    """What the window stage's counts hold after these turns (CorpusCounts.add, in memory)."""
    return Salience(dict(tally(documents)))


def other_users_replies(rng: random.Random, n: int = 300) -> list[set[int]]:
    subjects = ["your tax return", "the sourdough starter", "a python script", "the garden beds", "a job interview"]
    return [
        turn_buckets(
            turn_event(
                1, f"{rng.choice(OPENERS)} Here is what I found about {rng.choice(subjects)}. {rng.choice(CLOSERS)}"
            )
        )
        for _ in range(n)
    ]


def test_six_trip_sessions_padded_with_filler_are_episodes_about_the_trip() -> None:
    rng = random.Random(7)
    sessions = [session(n, user, assistant, rng) for n, (user, assistant) in enumerate(TRIP)]
    corpus = other_users_replies(rng) + [d for s in sessions for d in corpus_documents(s)]
    for salience in (tenant_counts(corpus), NEUTRAL):  # a tenant with history, and a new one
        for turns in sessions:
            episode = summarize(turns, 3, salience)
            assert episode is not None
            header, first = episode.text.split(". ", 1)
            assert "kyoto" in episode.topics[:3], (episode.topics, episode.text)
            assert not set(episode.topics) & (FILLER | STOPWORDS | {"thanks", "helpful", "anytime"}), episode.topics
            assert "about" in header
            assert "kyoto" in header.lower()
            assert not first.startswith(("assistant: Happy", "assistant: Great", "assistant: Absolutely")), episode.text
            assert "Anything else" not in episode.text


def test_a_sentence_many_replies_say_is_padding_and_a_rare_word_weighs_more() -> None:
    rng = random.Random(3)
    salience = tenant_counts(other_users_replies(rng))
    assert salience.documents >= MIN_DOCUMENTS
    assert salience.sentence("Happy to help with that!") < salience.sentence("The Haruka express runs to Kyoto.")
    assert salience.term("kyoto") == 1.0
    assert salience.term("found") < 0.5  # every other user's reply says it
    # Below MIN_DOCUMENTS the counts decide nothing: only the padding words weigh less.
    young = Salience({DOCUMENTS: MIN_DOCUMENTS - 1, sentence_bucket("Here is what I found."): 40})
    assert young.sentence("Here is what I found.") == 1.0
    assert young.sentence("Happy to help with that!") < 1.0  # padding words alone, counts or not
    assert young.term("found") == 1.0
    assert young.term("happy") < 1.0


@given(st.lists(st.text(max_size=80), max_size=12), st.dictionaries(st.integers(-1, 1 << 18), st.integers(0, 10**6)))
def test_weights_stay_in_range_whatever_the_counts(texts: list[str], counts: dict[int, int]) -> None:
    salience = Salience(counts)
    for text in texts:
        for word in text.split():
            assert 0.0 < salience.term(word.lower()) <= 1.0
        assert 0.0 < salience.sentence(text) <= 1.0


def test_a_sentence_a_user_opens_every_session_with_is_padding_and_their_subject_is_not() -> None:
    """Sentences count in every turn (a formula whoever says it), terms in assistant turns only."""
    rng = random.Random(5)
    sessions = [
        [
            turn_event(0, f"Quick update from my side. {user}", start=T0 + timedelta(days=n)),
            turn_event(1, f"{rng.choice(OPENERS)} {assistant}", start=T0 + timedelta(days=n)),
        ]
        for n, (user, assistant) in enumerate(TRIP)
    ]
    mine = corpus_counts(t for s in sessions for t in s)
    assert (mine[TURNS], mine[DOCUMENTS]) == (12, 6)
    salience = tenant_counts(other_users_replies(rng) + [d for s in sessions for d in corpus_documents(s)])
    assert salience.sentence("Quick update from my side.") < 1.0
    assert salience.sentence("I'm planning a trip to Kyoto in April.") == 1.0
    assert salience.term("planning") == 1.0  # said by the user only: their subject, never padding
    for turns in sessions:
        episode = summarize(turns, 2, salience)
        assert episode is not None
        assert "Quick update" not in episode.text, episode.text


def test_counts_from_before_user_turns_were_counted_still_weigh_sentences() -> None:
    old = Salience({DOCUMENTS: 200, sentence_bucket("Here is what I found."): 150})
    assert old.turns == 200
    assert old.sentence("Here is what I found.") < 1.0
    # The first turns counted after an upgrade do not make the old counts weigh against a handful.
    upgraded = Salience({DOCUMENTS: 100_000, TURNS: 3, sentence_bucket("The metro is cheapest."): 6})
    assert upgraded.turns == 100_000
    assert upgraded.sentence("The metro is cheapest.") == 1.0


def test_a_support_desks_template_neither_answers_a_question_nor_stands_before_its_deferral() -> None:
    """ "I'm Ava, your virtual assistant." has three content words: read as substance, the deferral after it
    counted for nothing. Said in every reply of the tenant, it is a formula and is not read at all."""
    intro = "Thanks for reaching out to Brightway Support! I'm Ava, your virtual assistant."
    replies = [f"{intro} Your {thing} is sorted." for thing in ("router", "bill", "plan", "password", "order")] * 12
    counts = Salience(corpus_counts(turn_event(2 * i + 1, reply) for i, reply in enumerate(replies)))
    assert counts.formula("I'm Ava, your virtual assistant.")
    assert not counts.formula("The refund goes back to your card.")
    asked = "Will the refund go back to my card or as account credit?"
    reply = f"{intro} That depends on the billing team's decision; they'll confirm when they contact you."
    chunk = EvictedChunk(
        tenant_id="t", user_id="u", session_id="s", reason="session_end",
        turns=[turn_event(0, asked), turn_event(1, reply)], cause=["e0"],
    )  # fmt: skip
    assert [c.text for c in question_candidates(chunk)] == []
    assert [c.text for c in question_candidates(chunk, counts.formula)] == [asked]


def support_desk(rng: random.Random, n: int = 200) -> Salience:
    """A telecom's support tenant: every reply opens with the desk's template; a fifth of them are about contracts."""
    intro = "Thanks for reaching out to Brightway Support! I'm Ava, your virtual assistant."
    subjects = ["your contract renewal", "the router lights", "a line fault", "your direct debit", "the TV box"]
    return tenant_counts(
        [turn_buckets(turn_event(1, f"{intro} Here is the answer about {rng.choice(subjects)}.")) for _ in range(n)]
    )


def test_a_support_desks_brand_and_persona_name_no_episode_and_the_users_subject_and_name_label_none() -> None:
    salience = support_desk(random.Random(11))
    assert salience.padding("brightway")
    assert salience.padding("ava")
    assert not salience.padding("contract")  # in a fifth of the replies: what users come about, not padding
    texts = [
        "Hi, I'm Dana. I'd like to take the 18-month contract at £40 please.",
        "Thanks for reaching out to Brightway Support! I'm Ava, your virtual assistant. Done! Your new contract "
        "starts today at £40 a month.",
    ]
    episode = summarize([turn_event(i, text) for i, text in enumerate(texts)], 3, salience)
    assert episode is not None
    assert episode.topics[0] == "contract", episode.topics
    assert not {"dana", "take", "please", "brightway", "ava", "support"} & set(episode.topics), episode.topics
    # Dana is named (the user said it); the desk's names are not.
    assert episode.entities == ["Dana"], episode.entities
