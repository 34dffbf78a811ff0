"""The summarizer on a chunk of maximal turns: the event loop it shares keeps answering.

The extractive summary and the open questions read every sentence of a
chunk (up to a message's worth of text); they run in a worker thread, so the
loop the read service shares in the default stack is never held for them.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import orjson

from agents.questions import question_candidates
from agents.summarizer.extractive import summarize
from schemas import EvictedChunk, TurnEvent
from tests.agents.test_agents import Harness, harness  # noqa: F401 (the fixture)
from tests.agents.test_window_responsive import longest_pause
from tests.pathological import fill
from tests.stack import turn

TURNS = 12  # about 790 KB: under the 900 KiB a message may have


async def test_a_chunk_of_maximal_turns_never_holds_the_event_loop(
    harness: Callable[[Any, str], Harness],  # noqa: F811
) -> None:
    from agents.summarizer import agent

    h = harness(agent, "evicted")
    text = fill("I love jazz. Do you? ")
    turns = [TurnEvent.model_validate({**turn("t", "u", "s", i, text), "event_id": f"e{i}"}) for i in range(TURNS)]
    chunk = EvictedChunk(tenant_id="t", user_id="u", session_id="s", reason="trimmed", turns=turns, cause=["e0"])
    # What the loop would be held for if the stage summarized on it.
    started = time.perf_counter()
    summarize(turns, h.runtime.settings.summary_max_sentences)
    question_candidates(chunk)
    held = time.perf_counter() - started

    out = h.sink("candidates")
    work = asyncio.create_task(h.feed([orjson.dumps(chunk.model_dump(mode="json"))], lambda: bool(out.sent)))
    pause = await longest_pause(work)
    await work

    assert [c["type"] for c in out.values()] == ["episode"]
    print(f"summary {held:.3f} s; longest event-loop pause {pause:.3f} s")
    assert pause < held / 3
