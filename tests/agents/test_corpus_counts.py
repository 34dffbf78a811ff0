"""The window stage counts each accepted turn once (assistant terms, every turn's sentences); the summarizer weighs words with them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from agents.corpus import DOCUMENTS, TURNS, sentence_bucket, term_bucket
from agents.summarizer.agent import salience_by_tenant
from agents.window import agent
from schemas import EvictedChunk, TurnEvent
from tests.agents.test_agents import Harness, harness  # noqa: F401 (the fixture)
from tests.stack import turn


async def test_assistant_turns_are_counted_once_per_tenant_and_never_as_words(
    harness: Callable[[Any, str], Harness],  # noqa: F811
) -> None:
    h = harness(agent, "turns")
    candidates = h.sink("candidates")
    asked = turn("t", "u", "s", 0, "Can you plan my Kyoto trip?")
    reply = turn("t", "u", "s", 1, "Happy to help! Kyoto in April is lovely.", role="assistant")
    other = turn("t", "v", "s2", 1, "Happy to help! Your sourdough needs a warmer spot.", role="assistant")
    elsewhere = turn("t2", "w", "s3", 1, "Happy to help! Try the garden beds.", role="assistant")
    # Redeliveries of the same turns change nothing.
    await h.feed(
        [orjson.dumps(e) for e in (asked, reply, other, reply, elsewhere, other)], lambda: len(candidates.sent) >= 1
    )
    await h.feed([orjson.dumps(turn("t", "u", "s", 2, "Thanks!"))], lambda: len(candidates.sent) >= 2)

    counts = await h.runtime.corpus.counts(
        "t", [DOCUMENTS, term_bucket("kyoto"), term_bucket("sourdough"), term_bucket("plan")]
    )
    assert counts[DOCUMENTS] == 2  # the two assistant turns of tenant t, each once
    assert (await h.runtime.corpus.counts("t", [TURNS]))[TURNS] == 4  # and its four turns, for sentences
    said = sentence_bucket("Can you plan my Kyoto trip?")
    assert (await h.runtime.corpus.counts("t", [said]))[said] == 1  # a user's sentence counts
    assert counts[term_bucket("kyoto")] == 1
    assert counts[term_bucket("sourdough")] == 1
    assert term_bucket("plan") not in counts  # a user's words are not counted
    assert (await h.runtime.corpus.counts("t2", [DOCUMENTS]))[DOCUMENTS] == 1
    helped = sentence_bucket("Happy to help!")
    assert (await h.runtime.corpus.counts("t", [helped]))[helped] == 2
    async with h.runtime.pg.connection("test") as conn:
        columns = await (
            await conn.execute("SELECT column_name FROM information_schema.columns WHERE table_name = 'corpus_counts'")
        ).fetchall()
    assert {c["column_name"] for c in columns} == {"tenant_id", "bucket", "docs"}  # no text, no user

    # The summarizer's batch reads what its chunks name, per tenant.
    chunk = EvictedChunk(
        tenant_id="t",
        user_id="u",
        session_id="s",
        reason="trimmed",
        cause=["c"],
        turns=[TurnEvent.model_validate(e) for e in (asked, reply)],
    )
    saliences = await salience_by_tenant(h.runtime, [chunk])
    assert saliences["t"].documents == 2
    assert saliences["t"].turns == 4
    assert saliences["t"].counts[term_bucket("kyoto")] == 1
