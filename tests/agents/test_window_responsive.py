"""The window stage on the worst turns at the content limit: the event loop it shares keeps answering.

In the default stack the read service runs on the same event loop as the
stages, so a stage that computes for long on the loop holds every request.
Rule extraction is the window stage's CPU work; it runs in a worker thread,
and extraction itself runs one bounded window or clause per regex call (a
regex call holds the GIL), so what the loop waits for at a time is a few
milliseconds, never a whole turn's extraction.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agents.window import agent
from agents.window.outgoing import candidate_messages
from schemas import SessionEvent, TurnEvent
from services.core.config import Settings
from services.runtime import Runtime
from services.stores.postgres import OutboxMessage, migrate
from tests.pathological import pathological_turns
from tests.stack import turn

# The slowest turns for extract() (tests/bench/rules_worst.py), one user each.
WORST = ("repeat cue 'I work as a '", "repeat cue 'my job is a '", "cue 'moved from Pune ' repeated, then spaces")


@pytest.fixture
async def runtime(tmp_path: Path, pg_dsn: str) -> AsyncIterator[Runtime]:
    rt = Runtime.create(Settings(data_dir=tmp_path, pg_dsn=pg_dsn))
    await migrate(pg_dsn)
    await rt.pg.open()
    yield rt
    await rt.index.close()
    await rt.pg.close()


async def longest_pause(work: asyncio.Task[object], tick: float = 0.005) -> float:
    """The longest the loop went without running this coroutine while `work` was under way."""
    longest, last = 0.0, time.perf_counter()
    while not work.done():
        await asyncio.sleep(tick)
        now = time.perf_counter()
        longest, last = max(longest, now - last - tick), now
    return longest


async def test_the_worst_turns_never_hold_the_event_loop(runtime: Runtime) -> None:
    texts = pathological_turns()
    events = [TurnEvent.model_validate(turn("t", f"u{i}", "s", 0, texts[name])) for i, name in enumerate(WORST)]
    # What the loop would be held for, at least, if the stage extracted on it: the longest turn's candidates.
    held = 0.0
    for event in events:
        started = time.perf_counter()
        candidate_messages(event)
        held = max(held, time.perf_counter() - started)

    s = runtime.settings
    limits = agent.window_limits(s)
    work = asyncio.create_task(agent.handle_events(runtime, list[TurnEvent | SessionEvent](events), limits))
    pause = await longest_pause(work)
    messages: list[OutboxMessage] = await work

    assert len([m for m in messages if m.topic == "memory.candidates"]) >= len(events)  # an exchange each
    print(f"extraction {held:.3f} s for the worst turn; longest event-loop pause {pause:.3f} s")
    assert pause < held / 3
