"""Stages that scale apart: two worker processes share every stage's partitions, and one is killed mid-stream.

The stack runs with MEMSTREAM_WORKERS=2: the read service and the index stage
in the app process (the Qdrant Edge shard's owner), every other stage in two
worker processes, each stage one consumer group the two share. Figures go to
bench-results/fault-tests.jsonl like the other fault tests.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from services.core.stages import INDEX_STAGE, STAGE_NAMES, without
from tests.e2e.test_faults import (
    all_remembered,
    assert_exactly_once,
    conversation,
    fresh_stack,
    memory_outcome,
    outcome_figures,
    stream,
)
from tests.stack import Stack, app_restarts, read_dlq, record_fault_figures, settle, wait_for

pytestmark = pytest.mark.e2e
WORKER_STAGES = without(STAGE_NAMES, INDEX_STAGE)
# Partitions of each stage's input topics (topics.yaml): the consolidator reads two topics of 8.
PARTITIONS = {"window": 8, "summarizer": 8, "embedder": 8, "consolidator": 16}


@pytest.fixture
def workers_stack(tmp_path: Path) -> Iterator[Stack]:
    # Assignment gauges refreshed twice a second, so a rebalance shows at once.
    env = {"MEMSTREAM_WORKERS": "2", "MEMSTREAM_LAG_REFRESH_SECONDS": "0.5"}
    yield from fresh_stack(tmp_path, env)


def spread(stack: Stack) -> dict[int, dict[str, int]] | None:
    """Both workers' assignments once every worker stage's partitions are all held, each by both workers; else None."""
    seen = {number: stack.partitions_held(number) for number in (1, 2)}
    for stage in WORKER_STAGES:
        held = [seen[number].get(stage, 0) for number in (1, 2)]
        if sum(held) != PARTITIONS[stage] or min(held) == 0:
            return None
    return seen


async def test_two_workers_share_partitions_and_survive_a_kill(workers_stack: Stack) -> None:
    """SIGKILL one of two workers while 240 turns stream in: every turn is memory exactly once.

    Before the kill, each worker stage's partitions are split between the two
    workers (the partition spread); the killed worker's partitions move to
    the survivor or to the restarted worker, from their groups' committed
    offsets; what the dead process had half done is redone idempotently.
    The read service's process runs the index stage and nothing else, and
    never restarts.
    """
    stack = workers_stack
    before = await asyncio.to_thread(wait_for, lambda: spread(stack), 120, "partitions spread over both workers", 0.5)
    app_pid, killed_pid = stack.app_pid(), stack.worker_pid(1)
    turns, ends = conversation("scale", users=8, turns=240, seed=23)

    survivor_max: Counter[str] = Counter()

    async def watch_survivor(until: float) -> None:
        """The most partitions worker 2 held per stage while worker 1 was gone (takeover, when it came first)."""
        while time.monotonic() < until:
            try:
                now = await asyncio.to_thread(stack.partitions_held, 2)
            except httpx.HTTPError:
                now = {}
            for stage, count in now.items():
                survivor_max[stage] = max(survivor_max[stage], count)
            await asyncio.sleep(0.5)

    # The read service's process is a member of the index stage's group and of no other.
    def app_assignment() -> dict[str, int] | None:
        held = stack.partitions_held()
        return held if any(held.values()) else None

    app_held = await asyncio.to_thread(wait_for, app_assignment, 30, "the app's first assignment gauge", 0.5)

    streaming = asyncio.create_task(stream(stack, turns, ends, per_second=8))
    try:
        await asyncio.sleep(10)
        killed_at = time.monotonic()
        os.kill(killed_pid, signal.SIGKILL)
        watching = asyncio.create_task(watch_survivor(killed_at + 25))
        await streaming
        streamed_at = time.monotonic()
        await watching
    finally:
        streaming.cancel()

    recovered = settle(all_remembered(stack, turns), timeout=180)
    done_at = time.monotonic()
    outcome = memory_outcome(stack, turns)
    try:
        after = await asyncio.to_thread(wait_for, lambda: spread(stack), 90, "partitions spread after the restart")
    except TimeoutError:
        after = None
    dlq = await read_dlq(stack.bootstrap, quiet=2, within=20)
    record_fault_figures(
        "worker_killed",
        workers=2,
        turns_streamed=len(turns),
        session_ends=len(ends),
        partitions_before={"app": app_held, **{f"worker-{n}": held for n, held in before.items()}},
        survivor_max_partitions=dict(survivor_max),
        partitions_after=after and {f"worker-{n}": held for n, held in after.items()},
        **outcome_figures(outcome),
        dlq=len(dlq),
        seconds_after_last_send=None if recovered is None else round(done_at - streamed_at, 1),
        seconds_after_kill=None if recovered is None else round(done_at - killed_at, 1),
        worker_restarts=app_restarts(stack, "worker-1"),
        app_restarts=app_restarts(stack),
    )
    assert recovered is not None, f"not complete 180 s after the last turn: {outcome_figures(outcome)}"
    assert_exactly_once(outcome)
    assert dlq == [], "a killed worker sent good data to the DLQ"
    assert app_held == {INDEX_STAGE: 8}
    assert after is not None, "the restarted worker never got its share of the partitions back"
    assert app_restarts(stack, "worker-1") == 1
    assert stack.worker_pid(1) != killed_pid
    assert app_restarts(stack, "worker-2") == 0
    assert stack.app_pid() == app_pid, "the read service's process restarted"
    assert app_restarts(stack) == 0
