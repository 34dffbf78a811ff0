"""How far behind this process's stages are: the cue on which recall gives way to ingest.

The stages and the read service share a process (the embedded default) or
at least the machine's cores. A recall load that takes every core starves
the stages, and memory goes stale by tens of seconds while each recall is
still fast. Each stage batch reports how long its oldest event waited since
it was produced; the read service (services/api/read_gate.py) reads that
and lets recalls take less of the process while ingest is behind.

One record per process, as the metrics are: the stages and the read service
share no other object (the read service runs on a copy of the Runtime).
Processes of one stack share a late mark as well (LateMark): read replicas
and worker processes are separate processes on the same cores, and a
replica that saw only its own index feed took every core from the stages
while they fell 10 s behind (`make bench-replicas`, 8 clients).

A read's own side effects do not count: recall's access marks reach the
commands stage in one burst per window (services/api/access.py), and a mark
applied late makes no memory stale. Counted, every burst read as ingest
falling behind, and 8 clients recalling with marks on were paced to the
gate's longest wait (p95 0.23 s against 0.05 s). Nor does derived work
(BACKGROUND: episodes of sessions that closed), which no recall waits for.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from services.core.mapped import mapped


class LateMark:
    """When a stage batch of any process of the stack last started late: one wall-clock time in a file they all map.

    Every writer writes "now", so the last write wins and is the latest;
    an aligned 8-byte write is not torn on the platforms we run on. A
    process keeps its mark mapped for its whole life.
    """

    _AT = struct.Struct("<d")

    def __init__(self, path: Path) -> None:
        self._map = mapped(path, self._AT.size)

    def mark(self, at: float) -> None:
        self._AT.pack_into(self._map, 0, at)

    def last(self) -> float:
        return float(self._AT.unpack_from(self._map, 0)[0])


class Backlog:
    """The latest wait each stage saw at the start of a batch, and when; and the stack's late mark, if shared."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._wall = wall
        self._seen: dict[str, tuple[float, float]] = {}  # stage → (when, seconds its oldest event had waited)
        self._mark: LateMark | None = None
        self._publish_over: float | None = None

    def share(self, mark: LateMark, publish_over: float | None) -> None:
        """Read the stack's late mark in `behind`; with `publish_over`, set it when a batch here waited longer.

        A process running stages publishes; a read replica only reads (its
        own index feed running late is its own business, not the others').
        """
        self._mark, self._publish_over = mark, publish_over

    def saw(self, stage: str, waited: float) -> None:
        self._seen[stage] = (self._clock(), waited)
        if self._mark is not None and self._publish_over is not None and waited > self._publish_over:
            self._mark.mark(self._wall())

    def behind(self, over: float, within: float) -> bool:
        """A stage started a batch in the last `within` seconds whose oldest event had waited over `over`.

        The stages of other processes count through the shared mark, at the
        threshold they publish with (the stack's one setting).
        """
        since = self._clock() - within
        if any(at >= since and waited > over for at, waited in self._seen.values()):
            return True
        return self._mark is not None and self._wall() - self._mark.last() <= within

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
