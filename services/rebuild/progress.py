"""A progress bar with rate and ETA on a terminal, plain log lines anywhere else.

Small on purpose (no dependency): a rebuild reports how far it is, how fast
it goes and how long is left. The total may be unknown (a topic's end is
learnt while reading it) or grow; without it the bar shows count and rate.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable
from typing import TextIO

log = logging.getLogger("memstream.rebuild")

BAR_WIDTH = 30


def human_count(n: float) -> str:
    """1234 → 1.2k, 2_500_000 → 2.5M; below 1000 as is."""
    for limit, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(n) >= limit:
            return f"{n / limit:.1f}{suffix}"
    return f"{n:.0f}" if float(n).is_integer() else f"{n:.1f}"


def duration(seconds: float) -> str:
    """h:mm:ss, or m:ss under an hour."""
    whole = max(0, round(seconds))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def render(label: str, done: int, total: int | None, elapsed: float, unit: str, width: int = BAR_WIDTH) -> str:
    """One line: label, bar and percentage (when the total is known), count, rate, elapsed and ETA."""
    rate = done / elapsed if elapsed > 0 else 0.0
    parts = [label]
    if total:
        share = min(done / total, 1.0)
        filled = int(share * width)
        parts.append("[" + "#" * filled + "." * (width - filled) + f"] {share * 100:5.1f}%")
        parts.append(f"{human_count(done)}/{human_count(total)} {unit}")
    else:
        parts.append(f"{human_count(done)} {unit}")
    parts.append(f"{human_count(rate)} {unit}/s")
    parts.append(f"elapsed {duration(elapsed)}")
    if total and rate > 0 and done < total:
        parts.append(f"ETA {duration((total - done) / rate)}")
    return "  ".join(parts)


class Progress:
    """Counts work done; redraws the bar (a terminal) or logs a line every `log_every` seconds (not a terminal).

    `clock` is injectable so tests can drive time.
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
        self.total = total
        self.unit = unit
        self.done = 0
        self._stream = stream if stream is not None else sys.stderr
        self._tty = bool(getattr(self._stream, "isatty", lambda: False)())
        self._every = redraw_every if self._tty else log_every
        self._clock = clock
        self._started = clock()
        self._last_shown = self._started
        self._width = 0

    @property
    def elapsed(self) -> float:
        return self._clock() - self._started

    @property
    def rate(self) -> float:
        """Units per second so far."""
        elapsed = self.elapsed
        return self.done / elapsed if elapsed > 0 else 0.0

    def line(self) -> str:
        return render(self.label, self.done, self.total, self.elapsed, self.unit)

    def advance(self, n: int = 1, *, total: int | None = None) -> None:
        """Add `n` done; `total` replaces the total when it became known or grew."""
        self.done += n
        if total is not None:
            self.total = total
        if self._clock() - self._last_shown >= self._every:
            self._show()

    def _show(self) -> None:
        self._last_shown = self._clock()
        text = self.line()
        if self._tty:
            # Pad over a longer previous line; no newline, so the bar redraws in place.
            self._stream.write("\r" + text.ljust(self._width))
            self._width = len(text)
            self._stream.flush()
        else:
            log.info("%s", text)

    def finish(self) -> str:
        """The final line, shown once whatever the timing; returned for the caller's summary."""
        text = self.line()
        if self._tty:
            self._stream.write("\r" + text.ljust(self._width) + "\n")
            self._stream.flush()
        else:
            log.info("%s (done)", text)
        return text
