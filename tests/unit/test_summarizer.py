import time
from datetime import UTC, datetime, timedelta

from agents.summarizer.candidates import episode_candidate
from agents.summarizer.extractive import MIN_SPREAD_WEIGHT, Episode, prose, spread_weight, summarize
from schemas import EvictedChunk, Role, TurnEvent
from services.core.terms import entities
from tests.factories import turn_event
from tests.pathological import fill

T0 = datetime(2026, 3, 1, 12, tzinfo=UTC)


def turns(*texts: str) -> list[TurnEvent]:
    return [turn_event(i, text, timedelta(minutes=1), T0, dia_id=f"D1:{i}") for i, text in enumerate(texts)]


def summary(chunk: list[TurnEvent], max_sentences: int = 2) -> Episode:
    episode = summarize(chunk, max_sentences)
    assert episode is not None
    return episode


def users(*texts: str) -> list[TurnEvent]:
    return [t.model_copy(update={"role": Role.USER}) for t in turns(*texts)]


def test_summary_keeps_the_salient_sentences_in_order() -> None:
    chunk = turns(
        "I'm planning a trip to Japan in April. The trip is for cherry blossoms.",
        "Japan in April is lovely for cherry blossoms.",
        "ok",
        "Do you want hotel suggestions for the Japan trip?",
    )
    episode = summary(chunk)
    assert "japan" in episode.topics
    assert episode.text.startswith("Conversation on 2026-03-01 about")
    assert "user: I'm planning a trip to Japan in April." in episode.text
    assert episode.started_at == T0
    assert episode.ended_at == T0 + timedelta(minutes=3)
    assert "Japan" in episode.entities


def test_names_said_in_every_turn_do_not_make_the_episode() -> None:
    # Two people calling each other by name in every turn, both users (LoCoMo's sessions read like this).
    chunk = users(
        "Gina: Hey Jon, how are you?",
        "Jon: Thanks, Gina! I lost my job at the bank last week, so I'm starting my own dance studio.",
        "Gina: Wow, Jon! Sure thing, Jon.",
        "Jon: Thanks, Gina! I'm looking at a space downtown with a sprung floor for the classes.",
        "Gina: Thanks, Jon!",
        "Jon: Thanks, Gina!",
    )
    episode = summary(chunk)
    said = episode.text.split(". ", 1)[1]
    assert "dance studio" in said
    assert "sprung floor" in said
    assert "Thanks, Gina!" not in said
    assert "Sure thing" not in said
    # A sentence said twice is kept once, at most.
    twice = summary(users("Nate: I adopted a turtle named Shelly.", "Nate: I adopted a turtle named Shelly."), 3)
    assert twice.text.count("Shelly") == 1


def test_a_word_weighs_less_the_more_of_a_chunks_turns_say_it() -> None:
    weights = [spread_weight(n, 10) for n in range(1, 11)]
    assert weights[0] == 1.0
    assert weights == sorted(weights, reverse=True)
    assert weights[-1] == MIN_SPREAD_WEIGHT
    # Two turns are no spread to speak of.
    assert spread_weight(2, 2) == 1.0


def test_nothing_to_summarize() -> None:
    assert summarize(turns("ok", "hi"), 3) is None


def test_episode_candidate_carries_every_source_turn() -> None:
    chunk = EvictedChunk(
        tenant_id="t",
        user_id="u",
        session_id="s",
        reason="trimmed",
        turns=turns("We adopted a puppy named Biscuit.", "Congratulations on Biscuit!"),
        cause=["e9"],
    )
    candidate = episode_candidate(chunk, 3)
    assert candidate is not None
    assert candidate.source.event_ids == ["e0", "e1"]
    assert candidate.source.metadata == [{"dia_id": "D1:0"}, {"dia_id": "D1:1"}]
    assert episode_candidate(chunk, 3) == candidate


def test_an_llm_episode_keeps_the_chunks_id_times_and_entities() -> None:
    from agents.summarizer.candidates import EXTRACTOR, LLM_EXTRACTOR, candidate_for, llm_episode
    from services.llm import EpisodeAnswer

    chunk = EvictedChunk(
        tenant_id="t",
        user_id="u",
        session_id="s",
        reason="session_end",
        turns=turns("We adopted a puppy named Biscuit.", "Congratulations on Biscuit!"),
        cause=["e9"],
    )
    extractive = summarize(chunk.turns, 3)
    assert extractive is not None
    answer = EpisodeAnswer(summary=" The user adopted a puppy, Biscuit. ", topics=["Pets", " "], open_questions=["?"])
    episode = llm_episode(extractive, answer)
    assert (episode.text, episode.topics, episode.open_questions) == (
        "The user adopted a puppy, Biscuit.",
        ["pets"],
        ["?"],
    )
    assert (episode.started_at, episode.ended_at, episode.entities) == (
        extractive.started_at,
        extractive.ended_at,
        extractive.entities,
    )
    by_llm, by_rules = candidate_for(chunk, episode, LLM_EXTRACTOR), candidate_for(chunk, extractive, EXTRACTOR)
    assert by_llm.candidate_id == by_rules.candidate_id  # one chunk, one episode, whichever path wrote it
    assert by_llm.extractor == "llm/v1"
    assert by_llm.category == "pets"
    no_topics = llm_episode(extractive, EpisodeAnswer(summary="s"))
    assert no_topics.topics == extractive.topics


def test_topics_are_never_counts_or_contractions() -> None:
    chunk = users(
        "What's a realistic daily budget for two people travelling around Japan for two weeks?",
        "Two people in Japan spend about two hundred dollars a day; what's left goes to the rail pass.",
        "What's the cheapest way to get two rail passes?",
    )
    episode = summary(chunk)
    assert "japan" in episode.topics
    assert not {"two", "what's", "hundred"} & set(episode.topics)


def test_an_episode_reads_a_markdown_reply_as_plain_sentences() -> None:
    reply = (
        "### Crampons\n\n> **Note:** crampons in Patagonia are **not needed** in March; `microspikes` help.\n"
        "- **Torres del Paine** campsites in March must be booked ahead, 2*3 weeks before."
    )
    episode = summary(turns("Do I need crampons in Patagonia in March?", reply), 4)
    assert "assistant: Note: crampons in Patagonia are not needed in March; microspikes help." in episode.text
    assert "assistant: Torres del Paine campsites in March must be booked ahead, 2*3 weeks before." in episode.text
    for mark in ("**", "#", ">", "`", "- "):
        assert mark not in episode.text, mark


MARKDOWN_UNITS = ("*", "* a", "`", "`a", "** ", "**a ", "__x ", "- ", "# ", "1. ", "> ", "- **Step 1:** Go ", "Aa * ")


def test_markdown_marks_at_the_content_limit_stay_linear() -> None:
    """Unpaired marks, runs of them and list marks by the thousand: each turn well under a CPU second.

    CPU seconds of this process (time.process_time), as tests/unit/test_rules_linear.py
    measures; an emphasis pattern that scanned to the end of the line from every mark
    took 22 s on 60,000 backticks.
    """
    for unit in MARKDOWN_UNITS:
        text = fill(unit)
        started = time.process_time()
        summarize(turns(text, text.replace("*", "`")), 3)
        entities(text)
        assert time.process_time() - started < 1.0, unit


def test_code_blocks_are_no_sentences_and_no_topics() -> None:
    """A coding assistant's episode says what was asked and advised, not the first line of its code."""
    fence = "`" * 3
    chunk = turns(
        "My Flask login route returns 500 after I added JWT tokens.",
        f"Here's how to debug it:\n\n{fence}python\n@app.route('/login', methods=['POST'])\ndef login():\n"
        f"    token = create_access_token(identity=data['user'])\n    return jsonify(token=token)\n{fence}\n\n"
        "**Check** that `JWT_SECRET_KEY` is set; a missing secret key raises an error.",
    )
    episode = summary(chunk, max_sentences=3)
    assert "@app.route" not in episode.text
    assert "def login" not in episode.text
    assert "Check that JWT_SECRET_KEY is set" in episode.text
    assert not {"jsonify", "create_access_token", "identity", "def"} & set(episode.topics)
    # A reply of code alone leaves the user's words.
    only_code = summary(
        turns("Write a pytest test for the login route.", f"{fence}\ndef test_login(client):\n    pass\n{fence}")
    )
    assert "assistant:" not in only_code.text


def test_prose_drops_fenced_blocks_line_by_line() -> None:
    assert prose("a\n```py\nx = 1\n```\nb") == "a\nb"
    assert prose("a\n````\nx\n```\nstill code\n````\nb") == "a\nb"  # a shorter fence does not close it
    assert prose("a\n~~~\nx") == "a"  # unclosed: code to the end
    assert prose("inline ``` is not a fence") == "inline ``` is not a fence"
    started = time.perf_counter()
    prose("```\n" * 20_000)
    assert time.perf_counter() - started < 1.0
