"""A rebuild's progress: a tqdm bar on a terminal, plain log lines anywhere else.

A rebuild reports how far it is, how fast it goes and how long is left. The
total may be unknown (a topic's end is learnt while reading it) or grow;
without it, or once the count passes it, the line shows count and rate only.

On a terminal tqdm draws and paces the bar. Elsewhere (a pipe, a log file,
tests and CI capturing stderr) a redrawn bar would be a run of carriage
returns, so the same figures go out as a log line every few seconds instead,
formatted by tqdm without the bar.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

from tqdm import tqdm  # type: ignore[import-untyped]

log = logging.getLogger("memstream.rebuild")


class Progress:
    """Counts work done; a tqdm bar shows it on a terminal, a log line every `log_every` seconds elsewhere.

    `total` may be set or replaced at any time. `clock` is injectable so tests can drive the log lines' time.
    """

    def __init__(
        self,
        label: str,
        total: int | None = None,
        *,
        unit: str = "items",
        stream: TextIO | None = None,
        log_every: float = 5.0,
        redraw_every: float = 0.1,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.label = label
        self.unit = unit
        self.done = 0
        self._total = total
        self._clock = clock
        self._started = clock()
        self._last_logged = self._started
        self._log_every = log_every
        stream = stream if stream is not None else sys.stderr
        self._terminal = stream if stream.isatty() else None
        self._redraw_every = redraw_every
        self._bar: Any = None

    @property
    def total(self) -> int | None:
        return self._total

    @total.setter
    def total(self, value: int | None) -> None:
        self._total = value
        if self._bar is not None:
            self._bar.total = value

    def _shown(self) -> Any:
        """The terminal's bar, made at the first progress or the finish, not before.

        A command that fails before its work starts (say, the stack is running) then prints its error alone,
        not after a bar of nothing.
        """
        if self._bar is None:
            # miniters=1: redraw by time only; smoothing=0: the rate is the average so far, as in the log lines.
            self._bar = tqdm(
                desc=self.label,
                total=self._total,
                unit=f" {self.unit}",
                unit_scale=True,
                file=self._terminal,
                mininterval=self._redraw_every,
                miniters=1,
                smoothing=0,
                dynamic_ncols=True,
            )
        return self._bar

    @property
    def elapsed(self) -> float:
        return self._clock() - self._started

    @property
    def rate(self) -> float:
        """Units per second so far."""
        elapsed = self.elapsed
        return self.done / elapsed if elapsed > 0 else 0.0

    def line(self) -> str:
        """Label, share of the total (when known), count/total, elapsed<remaining and rate, on one line."""
        text: str = tqdm.format_meter(
            self.done, self.total, self.elapsed, ncols=0, prefix=self.label, unit=f" {self.unit}", unit_scale=True
        )
        return text

    def advance(self, n: int = 1, *, total: int | None = None) -> None:
        """Add `n` done; `total` replaces the total when it became known or grew."""
        if total is not None:
            self.total = total
        self.done += n
        if self._terminal is not None:
            self._shown().update(n)  # a bar made now starts at 0, as `done` did
        elif self._clock() - self._last_logged >= self._log_every:
            self._last_logged = self._clock()
            log.info("%s", self.line())

    def finish(self) -> str:
        """The final line, shown once whatever the timing; returned for the caller's summary."""
        text = self.line()
        if self._terminal is not None:
            self._shown().close()  # draws the final state and leaves it on its own line
        else:
            log.info("%s (done)", text)
        return text
