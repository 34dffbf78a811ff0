"""The rebuild progress display: a bar with rate and ETA on a terminal, log lines elsewhere."""

from __future__ import annotations

import io
import logging

import pytest

from services.rebuild.progress import Progress, duration, human_count, render


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(
    ("n", "text"), [(0, "0"), (999, "999"), (1234, "1.2k"), (2_500_000, "2.5M"), (7.5, "7.5"), (3e9, "3.0G")]
)
def test_counts_are_short(n: float, text: str) -> None:
    assert human_count(n) == text


@pytest.mark.parametrize(("seconds", "text"), [(0, "0:00"), (59.6, "1:00"), (754, "12:34"), (3 * 3600 + 5, "3:00:05")])
def test_durations_read_as_clock_times(seconds: float, text: str) -> None:
    assert duration(seconds) == text


def test_a_known_total_shows_bar_share_rate_and_eta() -> None:
    line = render("index", 25_000, 100_000, 10.0, "memories", width=20)
    assert line == (
        "index  [#####...............]  25.0%  25.0k/100.0k memories  2.5k memories/s  elapsed 0:10  ETA 0:30"
    )


def test_an_unknown_total_shows_count_and_rate_only() -> None:
    assert render("store", 1500, None, 3.0, "changes") == "store  1.5k changes  500 changes/s  elapsed 0:03"


def test_done_work_has_no_eta_and_never_more_than_a_full_bar() -> None:
    line = render("index", 120, 100, 4.0, "memories", width=10)
    assert "[##########] 100.0%" in line
    assert "ETA" not in line


def test_on_a_terminal_the_bar_redraws_in_place_and_ends_with_a_newline() -> None:
    clock, out = Clock(), Terminal()
    progress = Progress("index", 100, unit="memories", stream=out, redraw_every=0.1, clock=clock)
    clock.now += 1
    progress.advance(10)
    clock.now += 0.05
    progress.advance(10)  # within the redraw interval: not drawn
    clock.now += 1
    progress.advance(30, total=200)
    progress.finish()
    frames = out.getvalue().split("\r")[1:]
    assert len(frames) == 3
    assert "10/100 memories" in frames[0]
    assert "50/200 memories" in frames[1]
    assert out.getvalue().endswith("\n")
    assert "\n" not in "".join(frames[:-1])


def test_elsewhere_it_logs_a_line_every_few_seconds(caplog: pytest.LogCaptureFixture) -> None:
    clock, out = Clock(), io.StringIO()
    progress = Progress("store", unit="changes", stream=out, log_every=5.0, clock=clock)
    with caplog.at_level(logging.INFO, logger="memstream.rebuild"):
        for _ in range(12):
            clock.now += 1
            progress.advance(100)
        summary = progress.finish()
    assert out.getvalue() == ""  # no control characters in a log file or a pipe
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 3  # at 5 s, at 10 s, and the final line
    assert lines[0].startswith("store  500 changes  100 changes/s")
    assert lines[-1] == summary + " (done)"
    assert "1.2k changes" in summary
    assert progress.rate == pytest.approx(100.0)
