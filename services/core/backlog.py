"""How far behind this process's stages are: the cue on which recall gives way to ingest.

The stages and the read service share a process (the embedded default) or
at least the machine's cores. A recall load that takes every core starves
the stages, and memory goes stale by tens of seconds while each recall is
still fast. Each stage batch reports how long its oldest event waited since
it was produced; the read service (services/api/read_gate.py) reads that
and lets recalls take less of the process while ingest is behind.

One record per process, as the metrics are: the stages and the read service
share no other object (the read service runs on a copy of the Runtime).

A read's own side effects do not count: recall's access marks reach the
commands stage in one burst per window (services/api/access.py), and a mark
applied late makes no memory stale. Counted, every burst read as ingest
falling behind, and 8 clients recalling with marks on were paced to the
gate's longest wait (p95 0.23 s against 0.05 s). Nor does derived work
(BACKGROUND: episodes of sessions that closed), which no recall waits for.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any


class Backlog:
    """The latest wait each stage saw at the start of a batch, and when."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._seen: dict[str, tuple[float, float]] = {}  # stage → (when, seconds its oldest event had waited)

    def saw(self, stage: str, waited: float) -> None:
        self._seen[stage] = (self._clock(), waited)

    def behind(self, over: float, within: float) -> bool:
        """A stage started a batch in the last `within` seconds whose oldest event had waited over `over`."""
        since = self._clock() - within
        return any(at >= since and waited > over for at, waited in self._seen.values())

    def clear(self) -> None:
        self._seen.clear()


READ_SIDE: tuple[str, bytes] = ("memstream-read-side", b"1")
"""The Kafka header a read's side effect carries, so no stage counts its wait as ingest behind."""


BACKGROUND: tuple[str, bytes] = ("memstream-lane", b"background")
"""The Kafka header of derived work (the summarizer's episodes and questions): it yields to what a user just said."""

Headers = Iterable[tuple[str, bytes]] | Mapping[str, bytes] | None


def _has(headers: Headers, header: tuple[str, bytes]) -> bool:
    if not headers:
        return False
    pairs: Iterable[Any] = headers.items() if isinstance(headers, Mapping) else headers
    return any(tuple(pair) == header for pair in pairs)


def is_read_side(headers: Headers) -> bool:
    return _has(headers, READ_SIDE)


def is_background(headers: Headers) -> bool:
    return _has(headers, BACKGROUND)


def counts_as_ingest(headers: Headers) -> bool:
    """Whether a message's wait says ingest is behind: not a read's side effect, not derived work."""
    return not (is_read_side(headers) or is_background(headers))


def oldest_wait(stamps: Iterable[float | None], now: float) -> float:
    """Seconds the oldest of a batch's messages has waited since it was produced (Kafka timestamps, in seconds).

    A message without a timestamp counts as just produced; a timestamp ahead
    of this clock (skew between hosts) as no wait.
    """
    known = [t for t in stamps if t is not None]
    return max(now - min(known), 0.0) if known else 0.0


STAGES = Backlog()
