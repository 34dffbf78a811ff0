"""Recall gives way to ingest: the stages' backlog record and the read service's gate, on a hand-driven clock."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.api.read_gate import CUT_EVERY, GROWTH_PER_SECOND, ReadGate
from services.core import backlog
from services.core.backlog import Backlog, LateMark, oldest_wait


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now


def test_the_oldest_message_sets_the_wait_and_missing_or_future_stamps_count_as_none() -> None:
    assert oldest_wait([99.0, 97.5, None, 98.0], now=100.0) == 2.5
    assert oldest_wait([None, None], now=100.0) == 0.0
    assert oldest_wait([], now=100.0) == 0.0
    assert oldest_wait([100.4], now=100.0) == 0.0  # a producer's clock ahead of ours


def test_a_late_batch_counts_only_while_recent_and_only_over_the_limit() -> None:
    clock = Clock()
    backlog = Backlog(clock)
    backlog.saw("window", 0.3)
    assert not backlog.behind(over=0.5, within=1.0)
    backlog.saw("embedder", 0.8)
    assert backlog.behind(over=0.5, within=1.0)
    clock.now += 1.5
    assert not backlog.behind(over=0.5, within=1.0)  # no batch since: nothing says the stages are behind now
    backlog.saw("embedder", 0.1)
    assert not backlog.behind(over=0.5, within=1.0)  # its latest batch replaced the late one


def test_a_late_batch_in_another_process_of_the_stack_counts_through_the_shared_mark(tmp_path: Path) -> None:
    clock = Clock()  # one clock for both: a wall clock is shared by the processes of one host
    worker, replica = Backlog(clock, wall=clock), Backlog(clock, wall=clock)
    worker.share(LateMark(tmp_path / "run" / "ingest-late"), publish_over=0.5)
    replica.share(LateMark(tmp_path / "run" / "ingest-late"), publish_over=None)
    worker.saw("window", 0.3)
    assert not replica.behind(over=0.5, within=1.0)
    worker.saw("embedder", 0.8)
    assert replica.behind(over=0.5, within=1.0)
    replica.saw("index_replica", 9.0)  # a replica's own feed: its business, not the stack's
    clock.now += 1.5
    assert not replica.behind(over=0.5, within=1.0)
    assert not worker.behind(over=0.5, within=1.0)


def test_the_worker_shares_its_late_batches_unless_it_builds_a_generation(tmp_path: Path) -> None:
    from services.core.config import Settings
    from services.process.runner import late_mark, publish_over

    settings = Settings(data_dir=tmp_path, ingest_behind_seconds=0.25)
    assert publish_over(settings) == 0.25
    assert publish_over(settings.model_copy(update={"generation": "v2"})) is None
    late_mark(settings).mark(1_000.0)
    assert late_mark(settings).last() == 1_000.0  # every process of the stack maps the same file


def gate(clock: Clock, floor: float = 0.05, max_wait: float = 10.0) -> tuple[ReadGate, Backlog]:
    backlog = Backlog(clock)

    async def sleep(seconds: float) -> None:  # the pause passes on the same clock
        clock.slept.append(seconds)
        clock.now += seconds
        await asyncio.sleep(0)

    return ReadGate(backlog, behind_seconds=0.5, floor=floor, max_wait=max_wait, clock=clock, sleep=sleep), backlog


async def recall(g: ReadGate, clock: Clock, seconds: float, log: list[str], name: str) -> None:
    async with g.admit():
        log.append(f"{name} in")
        clock.now += seconds  # the recall's own wall time
        await asyncio.sleep(0)
        log.append(f"{name} out")


async def test_recalls_run_together_and_unpaused_while_ingest_keeps_up() -> None:
    clock = Clock()
    g, backlog = gate(clock)
    backlog.saw("window", 0.2)
    log: list[str] = []
    await asyncio.gather(*(recall(g, clock, 0.01, log, str(i)) for i in range(3)))
    assert log[:3] == ["0 in", "1 in", "2 in"]  # all three inside at once
    assert g.share == 1.0


async def test_a_late_batch_halves_the_share_at_most_once_per_cut_interval_down_to_the_floor() -> None:
    clock = Clock()
    g, backlog = gate(clock, floor=0.2)
    log: list[str] = []
    backlog.saw("window", 2.0)
    await recall(g, clock, 0.0, log, "a")
    assert g.share == 0.5
    backlog.saw("window", 2.0)
    await recall(g, clock, 0.0, log, "b")
    assert g.share == 0.5  # the same instant: the stages have not had time to show the cut
    for _ in range(5):
        clock.now += CUT_EVERY
        backlog.saw("window", 2.0)
        await recall(g, clock, 0.0, log, "c")
    assert g.share == 0.2


async def test_below_a_whole_share_recalls_are_spaced_to_keep_within_it() -> None:
    clock = Clock()
    g, backlog = gate(clock)
    await recall(g, clock, 0.02, [], "typical")  # ingest keeps up: no wait, and the gate learns 20 ms
    assert clock.slept == []
    backlog.saw("consolidator", 3.0)
    start = clock.now
    for i in range(3):  # one client asking again as soon as it has its answer
        await recall(g, clock, 0.02, [], str(i))
    assert g.share == 0.5
    # At one half, each 20 ms recall is followed by 20 ms left to the stages: starts 0, 40 and 80 ms in.
    assert clock.slept == [pytest.approx(0.02), pytest.approx(0.02)]
    assert clock.now - start == pytest.approx(0.1)


async def test_no_recall_waits_longer_than_the_most_it_may() -> None:
    clock = Clock()
    g, backlog = gate(clock, floor=0.01, max_wait=0.25)
    await recall(g, clock, 0.1, [], "typical")
    for _ in range(8):  # the share down to its floor: a 100 ms recall every 10 s
        backlog.saw("window", 5.0)
        clock.now += 0.5
        g.refresh()
    assert g.share == pytest.approx(0.01)
    await asyncio.gather(*(recall(g, clock, 0.0, [], str(i)) for i in range(4)))
    assert clock.slept
    assert max(clock.slept) <= 0.25


async def test_the_share_grows_back_while_no_batch_is_late() -> None:
    clock = Clock()
    g, backlog = gate(clock)
    backlog.saw("window", 2.0)
    await recall(g, clock, 0.0, [], "cut")
    assert g.share == 0.5
    clock.now += 2.0  # the late batch is now older than the window that counts it
    await recall(g, clock, 0.0, [], "grown")
    assert g.share == pytest.approx(0.5 + (2.0) * GROWTH_PER_SECOND)
    clock.now += 10.0
    await recall(g, clock, 0.0, [], "whole")
    assert g.share == 1.0


async def test_a_floor_of_one_turns_the_gate_off() -> None:
    clock = Clock()
    g, backlog = gate(clock, floor=1.0)
    backlog.saw("window", 60.0)
    log: list[str] = []
    await asyncio.gather(*(recall(g, clock, 0.01, log, str(i)) for i in range(2)))
    assert log[:2] == ["0 in", "1 in"]
    assert g.share == 1.0


@given(st.lists(st.tuples(st.booleans(), st.floats(0, 5)), max_size=60), st.floats(0.01, 1.0))
def test_the_share_stays_between_the_floor_and_whole(steps: list[tuple[bool, float]], floor: float) -> None:
    clock = Clock()
    backlog = Backlog(clock)
    g = ReadGate(backlog, behind_seconds=0.5, floor=floor, max_wait=1.0, clock=clock)
    for late, advance in steps:
        clock.now += advance
        backlog.saw("window", 1.0 if late else 0.0)
        share = g.refresh()
        assert floor - 1e-9 <= share <= 1.0


def test_only_a_read_side_header_marks_an_event_as_a_reads_side_effect() -> None:
    assert backlog.is_read_side([backlog.READ_SIDE])
    assert backlog.is_read_side([("traceparent", b"00-ab"), backlog.READ_SIDE])
    assert backlog.is_read_side(dict([backlog.READ_SIDE]))
    assert not backlog.is_read_side(None)
    assert not backlog.is_read_side([])
    assert not backlog.is_read_side([(backlog.READ_SIDE[0], b"0")])
    assert not backlog.is_read_side({"memstream-reason": b"1"})
