"""Recall gives way to ingest while the stages are behind.

Eight clients recalling without pause took every core of a 2-core machine
and the stages fell 20-30 s behind, although each recall stayed fast: a
memory that answers quickly from a store 30 s old has forgotten the last
thing the user said. So recall gets a share of the process's time, cut
when a stage reports a batch whose oldest event waited too long
(services/core/backlog.py) and grown back while none does, the way TCP
finds a sending rate (additive increase, multiplicative decrease): the
share settles where the stages keep up, and on a machine with cores to
spare it stays whole and the gate costs one comparison per recall.

Below a whole share, recalls are paced: each is given a start time at
least its typical wall time divided by the share after the previous one's,
so recall keeps within its share of the wall clock. A recall's wall time
includes its waits for Postgres and for the cores, so a busier machine
spaces them further by itself. No recall waits longer than `max_wait`: a
recall that would is started then (and counted), so the gate can slow an
answer by that much at most and never makes one miss its deadline. No lock
is held, so a caller that goes away leaves nothing behind.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

from services.core import metrics
from services.core.backlog import Backlog

# How much of the share comes back per second without a late batch: from the floor to whole in ~10 s.
GROWTH_PER_SECOND = 0.1
# A late batch halves the share at most this often: the stages need a moment to show the cut worked.
CUT_EVERY = 0.5
# A late batch counts this long: long enough to span the stages' batch waits (0.1 s each).
BEHIND_WITHIN = 1.0
# Weight of the latest recall in the typical wall time (an exponential moving average).
SMOOTHING = 0.2


class ReadGate:
    """Admission for recall: at once while ingest keeps up, paced to a share of the wall clock while it is behind."""

    def __init__(
        self,
        backlog: Backlog,
        behind_seconds: float,
        floor: float,
        max_wait: float,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._backlog = backlog
        self._behind_seconds = behind_seconds
        self._floor = min(max(floor, 0.001), 1.0)
        self._max_wait = max_wait
        self._clock = clock
        self._sleep = sleep
        self._share = 1.0
        self._updated = clock()
        self._cut_at = float("-inf")
        self._next_at = float("-inf")  # the earliest start of the next paced recall
        self._typical = 0.0  # seconds a recall takes, smoothed

    @property
    def share(self) -> float:
        return self._share

    def refresh(self) -> float:
        """The share as of now: cut if a stage was late, else grown by the time since the last refresh."""
        now = self._clock()
        if self._floor < 1.0 and self._backlog.behind(self._behind_seconds, BEHIND_WITHIN):
            if now - self._cut_at >= CUT_EVERY:
                self._share, self._cut_at = max(self._floor, self._share / 2), now
        else:
            self._share = min(1.0, self._share + (now - self._updated) * GROWTH_PER_SECOND)
        self._updated = now
        metrics.READ_YIELD.set(1.0 - self._share)
        return self._share

    def _start_at(self, share: float) -> float:
        """When this recall may start; reserves the slot after it for the next one."""
        now = self._clock()
        start = max(now, self._next_at)
        if start - now > self._max_wait:
            metrics.READ_GATE_OVERRUNS.inc()
            return now + self._max_wait  # waits its most; the queue behind it keeps its slots
        self._next_at = start + self._typical / share
        return start

    @asynccontextmanager
    async def admit(self) -> AsyncIterator[None]:
        share = self.refresh()
        if share < 1.0:
            wait = self._start_at(share) - self._clock()
            metrics.READ_GATE_WAIT.observe(max(wait, 0.0))
            if wait > 0:
                await self._sleep(wait)
        started = self._clock()
        try:
            yield
        finally:
            took = self._clock() - started
            self._typical = took if self._typical == 0.0 else (1 - SMOOTHING) * self._typical + SMOOTHING * took
