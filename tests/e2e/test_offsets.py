"""Offsets only after effects, on the real embedded stack: a stopped worker or a refusing DLQ commits nothing undone.

Each test starts its own stack, reports its figures (printed, and a JSON line
in bench-results/fault-tests.jsonl) before it asserts, and checks the window
stage's committed offsets directly (OffsetFetch for its consumer group), next
to what a user sees afterwards: every turn's memory exactly once. Without a
broker: tests/unit/test_offsets.py.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from services.core import topics
from services.core.stages import group_id
from tests.e2e.test_faults import (
    all_remembered,
    assert_exactly_once,
    conversation,
    fresh_stack,
    memory_outcome,
    outcome_figures,
)
from tests.stack import (
    Stack,
    app_restarts,
    embedded_stack,
    postgres_paused,
    produce_records,
    read_dlq,
    record_fault_figures,
    settle,
    stack_settings,
)

pytestmark = pytest.mark.e2e


async def committed_offsets(stack: Stack, stage: str, topic: str = topics.TURNS) -> dict[int, int]:
    """The next offset `stage`'s consumer group would read, by partition of `topic` (absent: nothing committed)."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    group = group_id(stack_settings(stack).app_id, stage)
    consumer = AIOKafkaConsumer(bootstrap_servers=stack.bootstrap, group_id=group, enable_auto_commit=False)
    await consumer.start()
    try:
        found = {}
        for partition in range(8):
            offset = await consumer.committed(TopicPartition(topic, partition))
            if offset is not None and offset >= 0:
                found[partition] = offset
        return found
    finally:
        await consumer.stop()


def uncommitted(placed: list[tuple[int, int]], offsets: dict[int, int]) -> bool:
    """Every produced (partition, offset) lies at or past its partition's committed offset: none was committed."""
    return all(offset >= offsets.get(partition, 0) for partition, offset in placed)


def keyed(events: list[dict[str, Any]]) -> list[tuple[bytes | None, bytes | None]]:
    """Chat events as (key, value) records, keyed tenant:user as a chat service keys them."""
    return [(f"{e['tenant_id']}:{e['user_id']}".encode(), orjson.dumps(e)) for e in events]


def app_log(stack: Stack) -> str:
    return (stack.data_dir / "logs" / "app.log").read_text(errors="replace")


def exited(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # A zombie the supervisor has not reaped yet has exited too.
    return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] == "Z"


@pytest.fixture
def sigterm_stack(tmp_path: Path) -> Iterator[Stack]:
    # Short backoffs, so that the worker is in its retry sleep when the SIGTERM comes, and back soon after.
    yield from fresh_stack(tmp_path, {"MEMSTREAM_RETRY_MAX_BACKOFF": "2"})


async def test_sigterm_while_postgres_is_paused_commits_no_offset_and_the_restart_remembers_every_turn_once(
    sigterm_stack: Stack,
) -> None:
    """The window stage's batch waits out a stopped Postgres when the app is told to stop.

    Postgres is SIGSTOPped and 40 turns are produced (all acknowledged by the
    broker). The window stage's batch then either hangs in a query (a stopped
    server still holds its connections open) or, once a connection is refused,
    sleeps in its retry loop; after up to 15 s of that, the app gets a
    SIGTERM. It must exit with none of those turns' offsets committed for the
    window group; after SIGCONT the supervisor starts it again and every turn
    must be memory exactly once, nothing dead-lettered.
    """
    stack = sigterm_stack
    turns, ends = conversation("sigterm", users=4, turns=40, seed=21)
    pid = stack.app_pid()
    with postgres_paused(stack):
        placed = await produce_records(stack.bootstrap, keyed(turns))
        retrying = await asyncio.to_thread(
            settle, lambda: "window: store or broker unavailable, retrying" in app_log(stack), 15, 0.2
        )
        os.kill(pid, signal.SIGTERM)
        signalled_at = time.monotonic()
        stopped = await asyncio.to_thread(settle, lambda: exited(pid), 60, 0.2)
        offsets = await committed_offsets(stack, "window")
    resumed_at = time.monotonic()
    await produce_records(stack.bootstrap, keyed(ends))
    recovered = await asyncio.to_thread(settle, all_remembered(stack, turns), 180)
    outcome = memory_outcome(stack, turns)
    dlq = await read_dlq(stack.bootstrap, quiet=2, within=20)
    record_fault_figures(
        "sigterm_while_postgres_paused",
        turns=len(turns),
        window_in_retry_loop_at_sigterm=retrying is not None,
        seconds_to_exit_after_sigterm=None if stopped is None else round(stopped, 1),
        turns_committed_before_restart=sum(1 for p, o in placed if o < offsets.get(p, 0)),
        **outcome_figures(outcome),
        dlq=len(dlq),
        seconds_to_recover=None if recovered is None else round(time.monotonic() - resumed_at, 1),
        app_restarts=app_restarts(stack),
        signalled_to_recovered=None if recovered is None else round(time.monotonic() - signalled_at, 1),
    )
    assert stopped is not None, "the app did not exit within 60 s of SIGTERM while Postgres was stopped"
    assert uncommitted(placed, offsets), f"offsets committed for turns never processed: {offsets}"
    assert recovered is not None, f"not complete 180 s after SIGCONT: {outcome_figures(outcome)}"
    assert_exactly_once(outcome)
    assert dlq == [], "a stop during an outage sent good data to the DLQ"
    assert app_restarts(stack) >= 1


# --- a DLQ that refuses writes ----------------------------------------------------------

# Above what the worker's Kafka producer sends (Faust's default max.request.size, 1,000,000 bytes): the DLQ
# copy of a message near 1 MB is then refused by the client, as an undersized topic's broker would refuse it.
REFUSING_LIMIT = {"MEMSTREAM_MAX_MESSAGE_BYTES": "2000000"}


async def test_a_dlq_that_refuses_writes_commits_no_offset_past_the_item_and_a_restart_dead_letters_it_once(
    tmp_path: Path,
) -> None:
    """The window stage must dead-letter a turn the DLQ will not take: it retries, commits nothing past it, loses nothing.

    With memstream's message limit set above what its producer sends, the
    DLQ copy of a ~1 MB turn (oversized: over the content limit) is refused on
    every try. Turns before and after it, of the same user and of others, are
    produced too. The window group's committed offset must stay at or below
    the refused turn while it retries. Started again on the same data with the
    default limit, the stack dead-letters the turn exactly once (a truncated
    copy) and every valid turn becomes memory exactly once.
    """
    turns, ends = conversation("dlqrefuse", users=3, turns=12, seed=23)
    huge = {**turns[4], "event_id": f"{turns[4]['event_id']}-huge", "content": "0123456789abcdef" * 63_000}
    records = keyed([*turns[:6], huge, *turns[6:]])
    data_dir = tmp_path / "stack"
    with embedded_stack(data_dir, extra_env=REFUSING_LIMIT) as stack:
        placed = await produce_records(stack.bootstrap, records)
        huge_at = placed[6]
        refusing = await asyncio.to_thread(
            settle, lambda: app_log(stack).count("window: dead letter queue unavailable, retrying") >= 3, 90, 0.2
        )
        offsets = await committed_offsets(stack, "window")
        dlq_while_refusing = await read_dlq(stack.bootstrap, quiet=1, within=5)
    with embedded_stack(data_dir) as stack:
        await produce_records(stack.bootstrap, keyed(ends))
        recovered = await asyncio.to_thread(settle, all_remembered(stack, turns), 180)
        outcome = memory_outcome(stack, turns)
        dlq = await read_dlq(stack.bootstrap, at_least=1, quiet=2, within=30)
    record_fault_figures(
        "dlq_refusing_writes",
        turns=len(turns),
        refused_bytes=len(orjson.dumps(huge)),
        seconds_until_three_refusals=None if refusing is None else round(refusing, 1),
        committed_past_refused_turn=offsets.get(huge_at[0], 0) > huge_at[1],
        dlq_while_refusing=len(dlq_while_refusing),
        dlq_after_restart=len(dlq),
        dlq_reasons=[e.reason for e in dlq],
        **outcome_figures(outcome),
    )
    assert refusing is not None, "the window stage never retried the refused dead letter"
    assert offsets.get(huge_at[0], 0) <= huge_at[1], f"offset committed past the refused turn {huge_at}: {offsets}"
    assert dlq_while_refusing == []
    assert [(e.source, e.reason) for e in dlq] == [((topics.TURNS, *huge_at), "oversized")]
    assert recovered is not None, f"not complete 180 s after the restart: {outcome_figures(outcome)}"
    assert_exactly_once(outcome)
