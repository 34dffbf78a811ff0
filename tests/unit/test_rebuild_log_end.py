"""Where a replayed topic ends, when the broker's own "latest offset" cannot be trusted (services/kafka/log_end.py)."""

from __future__ import annotations

from services.kafka.log_end import EndDetector, Position, covered


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_end_is_every_partition_at_its_fetched_high_watermark_then_a_quiet_moment() -> None:
    clock = Clock()
    end = EndDetector(settle=1.0, idle=10.0, clock=clock)
    behind = {0: Position(286, 286), 1: Position(200, 285), 2: Position(0, 0)}
    at_end = {0: Position(286, 286), 1: Position(285, 285), 2: Position(0, 0)}
    clock.now = 5.0
    assert not end.done(behind)
    end.arrived()
    clock.now = 5.5
    assert not end.done(at_end)  # caught up, but a message came half a second ago
    clock.now = 6.0
    assert end.done(at_end)
    assert end.reason == "high watermark reached"


def test_a_partition_never_fetched_keeps_the_read_going_until_nothing_came_for_the_idle_time() -> None:
    clock = Clock()
    end = EndDetector(settle=1.0, idle=10.0, clock=clock)
    unknown = {0: Position(10, 10), 1: Position(0, None)}
    clock.now = 9.9
    assert not end.done(unknown)
    clock.now = 10.0
    assert end.done(unknown)
    assert end.reason == "no message for 10s"


def test_a_watermark_that_moved_on_means_not_yet_at_the_end() -> None:
    clock = Clock()
    end = EndDetector(settle=0.0, idle=60.0, clock=clock)
    assert end.done({0: Position(5, 5)})
    assert not end.done({0: Position(5, 9)})  # producers wrote meanwhile
    assert not EndDetector.caught_up({})  # no partitions: not an end, the idle time decides


def test_the_total_counts_from_the_first_offsets_to_the_watermarks() -> None:
    first = {0: 0, 1: 100}  # partition 1 lost its first 100 messages to retention
    assert covered(first, {0: Position(3, 286), 1: Position(100, 385)}) == 286 + 285
    assert covered(first, {0: Position(3, 286), 1: Position(100, None)}) is None
