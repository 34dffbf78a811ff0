"""The generation the read service answers from, followed in `public.generations` and switched atomically.

The read service has a Runtime of its own (a copy of the process's: the
agents keep theirs, so a switch never moves where a stage writes). Every
`generation_refresh_seconds` it reads which generation serves; when that
changed, it opens the new generation's Postgres pool (its schema first on
the search path) and index (its collection, or its Qdrant Edge shard, which
no other process holds once its rebuild has finished), then swaps them into
its Runtime in one step with no await in between: a request sees the old
generation or the new one, never half of each. The previous generation's
pool and index are closed a little later, after the requests that still
hold them have finished.

It also exports which generation serves and the lag of each generation
being built (the rebuild writes it into the registry), for /readyz and
/metrics.

As a read replica (settings.replica, with an embedded shard) every
generation it serves has an index of its own on this replica, fed by a
ReplicaFeed (services/api/replica.py); a switch waits until the new
generation's feed has caught up, so the replica never answers from an index
still being filled.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from services.api.index_follower import follow_index, follows
from services.api.replica import Peers, ReplicaFeed, ReplicaState
from services.core import generations, metrics
from services.core.errors import StoreError
from services.runtime import Runtime
from services.stores import open_vector_index
from services.stores.postgres import MemoryReader, PgPool, WindowStore
from services.stores.postgres import generations as registry
from services.stores.vector import VectorIndex

if TYPE_CHECKING:
    from fastapi import FastAPI

log = logging.getLogger(__name__)
# Requests that started on the previous generation finish within the request deadline; this is longer.
RETIRE_AFTER = 30.0


@dataclass(frozen=True)
class View:
    name: str
    pg: PgPool
    index: VectorIndex
    owned: bool  # opened here for a switch (closed when switched away), or the process's own (never closed here)
    fresh: bool = False  # its shard did not exist before it was opened (a replica fills it from the log's beginning)


class ServingGeneration:
    """Follows the registry and keeps the read service's Runtime on the serving generation."""

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self.name = rt.settings.generation or generations.DEFAULT
        self._own = View(self.name, rt.pg, rt.index, owned=False)
        self._current = self._own
        self.rebuilding: dict[str, int | None] = {}
        self._retiring: set[asyncio.Task[None]] = set()
        self._feeding: dict[str, asyncio.Task[None]] = {}  # generation → the task feeding its shard
        settings = rt.settings
        self.replica = settings.replica_name if settings.replica is not None and follows(settings) else None
        self._replica_feeds: dict[str, ReplicaFeed] = {}  # generation → this replica's feed of its index
        self._peers = Peers(rt, settings.replica_stale_seconds)
        self.replicas: dict[str, dict[str, float]] = {}  # every replica's lag and report age, as last read

    @classmethod
    def for_read_service(cls, runtime: Runtime) -> ServingGeneration:
        """A copy of the process's Runtime for the read service, and its follower."""
        return cls(dataclasses.replace(runtime))

    def report(self) -> dict[str, Any]:
        out: dict[str, Any] = {"generation": self.name, "rebuilding": dict(self.rebuilding)}
        if self.replica is not None:
            state = self.replica_state()
            out["replica"] = {
                "name": self.replica,
                "lag": None if state is None else state.lag,
                "caught_up": state is not None and state.caught_up.is_set(),
                "replicas": dict(self.replicas),
            }
        return out

    async def start_replica(self, *, fresh: bool) -> None:
        """Feed this replica's own index of the process's generation, and return once it has caught up."""
        assert self.replica is not None
        feed = self._start_feed(self._own, fresh=fresh)
        await feed.state.caught_up.wait()

    def replica_state(self) -> ReplicaState | None:
        feed = self._replica_feeds.get(self.name)
        return None if feed is None else feed.state

    async def replica_ready(self) -> bool:
        state = self.replica_state()
        return state is not None and state.caught_up.is_set()

    async def peers_reached(self, seconds: float) -> bool:
        """`?wait=true`: every other serving replica holds what this one's index holds now (True without replicas)."""
        state = self.replica_state()
        if state is None:
            return True
        return await self._peers.wait_reached(state, seconds)

    def _start_feed(self, view: View, *, fresh: bool) -> ReplicaFeed:
        assert self.replica is not None
        scoped = generations.scoped(self.rt.settings, view.name)
        rt = dataclasses.replace(self.rt, index=view.index, pg=view.pg)
        feed = ReplicaFeed(rt, scoped, self.replica, fresh=fresh)
        self._replica_feeds[view.name] = feed
        self._feeding[view.name] = asyncio.create_task(feed.run())
        return feed

    async def stop(self) -> None:
        for name in list(self._feeding):
            await self._stop_feeding(name)
        if self.replica is not None:
            await self._peers.leave(self.replica)

    async def refresh(self) -> None:
        # The registry lives in public: the process's own pool reaches it whatever serves.
        async with self._own.pg.connection("generations") as conn:
            rows = await registry.listing(conn)
        target = next((r.name for r in rows if r.state == "serving"), generations.DEFAULT)
        self.rebuilding = {r.name: r.detail.get("lag") for r in rows if r.state == "building"}
        metrics.set_generations({r.name: r.name == target for r in rows}, self.rebuilding)
        if self.replica is not None:
            listed = await self._peers.export(self.name)
            self.replicas = {p.name: {"lag": p.lag, "report_age_seconds": round(p.age_seconds, 1)} for p in listed}
        if target != self.name and self._own.name == generations.DEFAULT:
            # Only the default generation's read service follows: a process started in a generation stays in it.
            await self.switch(target)

    async def switch(self, name: str) -> None:
        view = self._own if name == self._own.name else await self._open(name)
        if self.replica is not None and view.owned:
            # This replica's copy of the generation's index is filled before it answers from it.
            await self._start_feed(view, fresh=view.fresh).state.caught_up.wait()
        previous = self._current
        # One step, no await: every request sees one generation's pool, reads, windows and index.
        self.rt.pg, self.rt.index = view.pg, view.index
        self.rt.reads, self.rt.windows = MemoryReader(view.pg), WindowStore(view.pg)
        self._current, self.name = view, name
        log.info("read service now serves generation %s (was %s)", name, previous.name)
        if view.owned and follows(self.rt.settings) and self.replica is None:
            self._feed(view)
        if previous.owned:
            task = asyncio.create_task(self._retire(previous))
            self._retiring.add(task)
            task.add_done_callback(self._retiring.discard)

    async def _open(self, name: str) -> View:
        settings = generations.scoped(self.rt.settings, name)
        pool = PgPool(
            settings.pg_dsn,
            settings.pg_pool_size,
            connect_timeout=settings.pg_connect_timeout,
            pool_timeout=settings.pg_pool_timeout,
        )
        await pool.open()
        fresh = not settings.qdrant_path.exists()
        index = open_vector_index(settings)
        try:
            await index.ensure((await self.rt.embedder()).dimension)
        except BaseException:
            await pool.close()
            raise
        return View(name, pool, index, owned=True, fresh=fresh)

    def _feed(self, view: View) -> None:
        """Feed the generation's shard, which this process now owns (services/api/index_follower.py)."""
        scoped = generations.scoped(self.rt.settings, view.name)
        task = asyncio.create_task(follow_index(dataclasses.replace(self.rt, index=view.index, pg=view.pg), scoped))
        self._feeding[view.name] = task

    async def _stop_feeding(self, name: str) -> None:
        self._replica_feeds.pop(name, None)
        task = self._feeding.pop(name, None)
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _retire(self, view: View) -> None:
        await self._stop_feeding(view.name)  # its consumer commits what the shard has before the shard closes
        await asyncio.sleep(RETIRE_AFTER)
        try:
            await view.pg.close()
            await view.index.close()
        except Exception as exc:  # a generation dropped meanwhile: nothing left to close cleanly
            log.info("closing generation %s's pool and index: %s", view.name, exc)

    async def follow(self, interval: float) -> None:
        """Refresh forever; a store outage skips a tick (the read service keeps its generation meanwhile)."""
        while True:
            try:
                await self.refresh()
            except StoreError as exc:
                log.warning("which generation serves: not known this tick (%s)", exc)
            except Exception:
                log.exception("following the serving generation failed this tick")
            await asyncio.sleep(interval)


def read_service(runtime: Runtime) -> tuple[FastAPI, ServingGeneration]:
    """The read service's app on its own Runtime copy, and the follower that keeps it on the serving generation.

    The caller runs `follower.follow(settings.generation_refresh_seconds)` beside the server.
    """
    from services.api.app import create_app
    from services.api.health import Readiness

    serving = ServingGeneration.for_read_service(runtime)
    return create_app(serving.rt, Readiness(serving.rt, serving), peers=serving.peers_reached), serving
