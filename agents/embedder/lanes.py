"""Two lanes into the model: what a user just said first, derived work after it.

A burst of sessions closing together (the idle timer closes every session
past the limit in one tick) makes hundreds of episodes at once, each several
times an exchange's cost to embed. In arrival order, every turn produced
meanwhile waited behind all of them: in the soak, each time ~200 sessions
went idle, produce -> memory.changes p99 went from 1.0 to 2.2 s while p50
stayed at 0.6 s.

Derived candidates carry `backlog.BACKGROUND` (the summarizer sets it). The
embedder hands them to a `BackgroundLane`: a queue that a task works through
in small model calls, each started only while no fresh batch is using the
model, each message acknowledged once its candidate is on memory.embedded.
Faust commits a partition only up to its oldest unacknowledged offset, so a
crash redoes the queued items and what came after them (the consolidator is
idempotent by candidate id): nothing is lost. A user's own order holds: a
candidate of a user who has work queued joins the queue behind it.
"""

from __future__ import annotations

import asyncio
import functools
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from agents.outage import outlasting
from schemas import MemoryCandidate
from services.core import metrics
from services.core.backlog import is_background

Scope = tuple[str, str]
Item = tuple[Any, MemoryCandidate]  # (the Faust event, its candidate)


def split(
    items: Sequence[Item], background: Callable[[Any], bool], queued: Counter[Scope]
) -> tuple[list[Item], list[Item]]:
    """(fresh, later), each in arrival order.

    `later` holds every background item, and every item of a user with work
    queued (`queued`) or with a background item earlier in `items`: a user's
    items never overtake each other.
    """
    held = {scope for scope, count in queued.items() if count > 0}
    fresh: list[Item] = []
    later: list[Item] = []
    for event, candidate in items:
        scope = (candidate.tenant_id, candidate.user_id)
        if scope in held or background(event):
            held.add(scope)
            later.append((event, candidate))
        else:
            fresh.append((event, candidate))
    return fresh, later


class BackgroundLane:
    """Derived work, embedded after the fresh batches and acknowledged message by message.

    `handle` embeds and forwards a list of items (the stage's `deliver`: bad
    items go to the DLQ, outages are waited out inside). It is retried on any
    other exception, as a stage batch is, so the lane never stops.
    """

    def __init__(
        self,
        handle: Callable[[list[Item]], Awaitable[None]],
        *,
        stage: str,
        capacity: int,
        batch: int,
        max_delay: float,
        on_forwarded: Callable[[], None] = lambda: None,
    ) -> None:
        self._handle = handle
        self._on_forwarded = on_forwarded  # between forwarding and acknowledging (a crash point in the tests)
        self._stage = stage
        self._batch = batch
        self._max_delay = max_delay
        self._queue: asyncio.Queue[Item] = asyncio.Queue(capacity)
        self._queued: Counter[Scope] = Counter()
        self._model_free = asyncio.Event()
        self._model_free.set()

    def split(self, items: Sequence[Item]) -> tuple[list[Item], list[Item]]:
        return split(items, lambda event: is_background(event.message.headers), self._queued)

    @contextmanager
    def fresh(self) -> Iterator[None]:
        """While a fresh batch is in the model, the lane starts no call of its own."""
        self._model_free.clear()
        try:
            yield
        finally:
            self._model_free.set()

    async def put(self, items: Sequence[Item]) -> None:
        """Queue `items`; waits while the lane is full (the stage then takes no new batch)."""
        for event, candidate in items:
            event.message.incref()  # acknowledged when forwarded, not with its batch (stage.take_batches)
            self._queued[candidate.tenant_id, candidate.user_id] += 1
            metrics.EMBED_BACKGROUND_QUEUED.inc()
            await self._queue.put((event, candidate))

    async def run(self) -> None:
        while True:
            items = [await self._queue.get()]
            while len(items) < self._batch and not self._queue.empty():
                items.append(self._queue.get_nowait())
            await self._model_free.wait()
            await outlasting(
                functools.partial(self._handle, items),
                stage=self._stage,
                what=f"a background batch of {len(items)}",
                max_delay=self._max_delay,
                failed=len(items),
                retry=lambda _: True,
            )
            self._on_forwarded()
            for event, candidate in items:
                scope = (candidate.tenant_id, candidate.user_id)
                self._queued[scope] -= 1
                if not self._queued[scope]:
                    del self._queued[scope]
                metrics.EMBED_BACKGROUND_QUEUED.dec()
                event.ack()
