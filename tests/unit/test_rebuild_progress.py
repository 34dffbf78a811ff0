"""The rebuild progress display: a tqdm bar on a terminal, log lines with the same figures elsewhere."""

from __future__ import annotations

import io
import logging

import pytest

from services.rebuild.progress import Progress


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def at(done: int, total: int | None, seconds: float, unit: str) -> str:
    clock = Clock()
    progress = Progress("index", total, unit=unit, stream=io.StringIO(), clock=clock)
    progress.done, clock.now = done, clock.now + seconds
    return progress.line()


def test_a_known_total_shows_share_count_elapsed_eta_and_rate() -> None:
    assert at(25_000, 100_000, 10.0, "memories") == "index:  25% 25.0k/100k [00:10<00:30, 2.50k memories/s]"


def test_an_unknown_total_shows_count_elapsed_and_rate_only() -> None:
    assert at(1500, None, 3.0, "changes") == "index: 1.50k changes [00:03, 500 changes/s]"


def test_a_count_past_its_total_shows_no_share_and_no_eta() -> None:
    line = at(120, 100, 4.0, "memories")
    assert "%" not in line
    assert "<" not in line
    assert "120 memories" in line


def test_on_a_terminal_the_bar_redraws_in_place_follows_the_total_and_ends_with_a_newline() -> None:
    out = Terminal()
    progress = Progress("index", 1000, unit="memories", stream=out, redraw_every=0)
    progress.advance(250)
    progress.advance(250, total=2000)
    progress.finish()
    frames = [f for f in out.getvalue().split("\r") if f]
    assert any("250/1.00k" in f for f in frames)
    assert "500/2.00k" in frames[-1]
    assert "25%" in frames[-1]
    assert "memories/s" in frames[-1]
    assert out.getvalue().endswith("\n")
    assert "\n" not in "".join(frames[:-1])


def test_on_a_terminal_redraws_wait_for_the_interval() -> None:
    out = Terminal()
    progress = Progress("store", unit="changes", stream=out, redraw_every=3600)
    for _ in range(50):
        progress.advance(7)
    progress.finish()
    frames = [f for f in out.getvalue().split("\r") if f]
    assert len(frames) == 2  # the empty start and the final state
    assert "350 changes" in frames[-1]


def test_the_total_set_directly_reaches_the_bar() -> None:
    out = Terminal()
    progress = Progress("index", unit="memories", stream=out, redraw_every=0)
    progress.total = 400
    progress.advance(100)
    progress.finish()
    assert "100/400" in out.getvalue().split("\r")[-1]


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
    assert lines[0] == "store: 500 changes [00:05, 100 changes/s]"
    assert lines[-1] == summary + " (done)"
    assert "1.20k changes" in summary
    assert progress.rate == pytest.approx(100.0)


def test_on_a_terminal_nothing_is_drawn_before_the_work_starts() -> None:
    out = Terminal()
    progress = Progress("index", unit="memories", stream=out)
    progress.total = 10
    assert out.getvalue() == ""  # an error printed now stands alone
    progress.finish()
    assert out.getvalue().endswith("\n")
    assert "  0%|" in out.getvalue().split("\r")[-1]
