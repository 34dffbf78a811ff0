"""Process entry points: a worker (any set of stages), the read service, or both.

Both in one process is the embedded default: a Qdrant Edge shard has one
owner, so the index stage (qdrant_sink) runs where the read service does.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import sys
import time
from collections.abc import Generator, Sequence
from contextlib import contextmanager
from typing import Any

import faust
import mode
import uvicorn
import uvloop
from prometheus_client import start_http_server
from starlette.types import ASGIApp

from agents.app import build_apps
from services.api.balance import Board, ConnectionBalance, Rebalance
from services.api.server import server_config, shared_port
from services.api.serving import read_service
from services.core import backlog, metrics, tracing
from services.core.backlog import LateMark
from services.core.config import Settings
from services.core.stages import INDEX_STAGE, STAGE_NAMES
from services.runtime import Runtime

log = logging.getLogger(__name__)


def _use_uvloop() -> None:
    """libuv's event loop for every loop this process makes (Faust's, its consumer threads', the read service's).

    The read service answers from one loop shared with the agents: under 8
    concurrent recalls at 100k memories the loop's own overhead was a fifth
    of a request's cost (make bench).
    """
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())


def _tune_interpreter(settings: Settings) -> None:
    """Once start-up is done, before serving: the collector and the GIL, as the settings say."""
    _tune_gc(settings)
    _shorten_gil_switch(settings)


def _tune_gc(settings: Settings) -> None:
    """Moves what start-up allocated (modules, the model, the apps) out of the collector's reach, and
    collects the young generation less often.

    Start-up objects live as long as the process; left in, every full
    collection walks them all, and one landed on a recall now and then (p99
    188 ms against a p50 of 48 ms under load before, 75 ms after). A recall
    allocates a few hundred containers: at Python's threshold (700), 20 s of
    8 concurrent clients (319 requests/s) made 2,929 young, 266 middle and
    24 full collections, and a full one walks all the process kept since
    start-up. `make bench` (after storing 100,000 memories) gave an 8-client
    p99 of 102 ms at 700 and 52 ms at `gc_young_threshold` (20,000), one run each.
    """
    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(settings.gc_young_threshold, older, oldest)
    if not any(isinstance(callback, _CollectionClock) for callback in gc.callbacks):
        gc.callbacks.append(_CollectionClock())


class _CollectionClock:
    """Each collection's pause on `memstream_gc_pause_seconds`: a stall of every stage and request in the process.

    The histogram's children are looked up once, here: a collection can
    start inside any allocation, a scrape's copy of the metric's children
    included, which holds the metric's (non-reentrant) lock that `labels()`
    takes. Observing a child takes only its values' locks, inside which
    nothing allocates.
    """

    def __init__(self) -> None:
        self.pauses = tuple(metrics.GC_PAUSE.labels(generation=str(generation)) for generation in range(3))
        self.started = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self.started = time.perf_counter()
        else:
            self.pauses[info["generation"]].observe(time.perf_counter() - self.started)


def _shorten_gil_switch(settings: Settings) -> None:
    """A thread waiting for the GIL gets it after `gil_switch_interval_ms` at most, not Python's 5 ms.

    Every hand-off in this process (a Kafka consumer thread, the Qdrant Edge
    owner thread, the model's thread returning a query vector) waits, when
    the loop is busy, until the holder is made to let go. Recall's own path
    no longer hands off, so what this buys is small: on a settled
    100k-memory stack 8 clients gave 275-297 requests/s at 1 ms against
    237-299 at 5 ms, sessions alternated.
    """
    sys.setswitchinterval(settings.gil_switch_interval_ms / 1000)


class _EmbeddedServer(uvicorn.Server):
    """uvicorn inside Faust's loop: Faust owns the signals, we stop the server."""

    @contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


class _Worker(faust.Worker):
    """Closes the stores last: after the app, and so every agent, has stopped.

    mode stops a service as on_stop → children (the app: consumer, agents,
    producer flush) → on_shutdown, so a store closed here is never closed
    under a batch still being written.
    """

    runtime: Runtime

    async def on_shutdown(self) -> None:
        await super().on_shutdown()
        await self.runtime.stop()


class _Stages(mode.Service):
    """A process's stage apps, started together and stopped in reverse.

    Starting an app waits for its consumer group's first assignment (about
    5 s on the embedded broker); as the worker's services they would start
    one after another and a process running every stage would take half a
    minute to serve. Their beacons hang under this service, so a crash in
    any app still reaches the worker and ends the process.
    """

    def __init__(self, apps: Sequence[faust.App]) -> None:
        self.apps = list(apps)
        super().__init__()

    async def on_start(self) -> None:
        for app in self.apps:
            app.beacon.reattach(self.beacon)
        await asyncio.gather(*(app.maybe_start() for app in self.apps))

    async def on_stop(self) -> None:
        for app in reversed(self.apps):
            await app.stop()


def late_mark(settings: Settings) -> LateMark:
    """The stack's shared late mark (services/core/backlog.py), beside the processes' pid files."""
    return LateMark(settings.data_dir / "run" / "ingest-late")


def publish_over(settings: Settings) -> float | None:
    """How late a worker's stage batch must be to pace the stack's reads; None: never.

    A generation other than the default reads history (while it is built,
    its every batch is "late"): background work that paces no one.
    """
    return settings.ingest_behind_seconds if settings.generation is None else None


def run_worker(settings: Settings, *, with_api: bool, stages: Sequence[str] = STAGE_NAMES) -> None:
    """One Faust worker running the apps of `stages` (one consumer group each), and the read service if asked."""
    _use_uvloop()
    tracing.configure("worker")
    # Its stages' late batches pace the stack's read processes too, and its read service (if any) hears theirs.
    backlog.STAGES.share(late_mark(settings), publish_over=publish_over(settings))
    runtime = Runtime.create(settings)
    (settings.data_dir / "faust").mkdir(parents=True, exist_ok=True)
    stage_apps = build_apps(settings, runtime, stages)
    # The first stage's app is the worker's own (its signals, its "ready"); all start together.
    app = stage_apps[0].app
    worker = _Worker(app, _Stages([s.app for s in stage_apps]), loglevel=settings.log_level.upper(), quiet=True)
    worker.runtime = runtime
    log.info("stages %s, consumer groups %s", ",".join(stages), ", ".join(s.app.conf.id for s in stage_apps))
    worker.loop.run_until_complete(runtime.start(with_index=with_api or INDEX_STAGE in stages))

    api, serving = read_service(runtime) if with_api else (None, None)
    server = _EmbeddedServer(server_config(api, settings)) if api is not None else None
    if server is not None and serving is not None:

        @app.task  # type: ignore[untyped-decorator]
        async def serve_http() -> None:
            await server.serve()

        @app.task  # type: ignore[untyped-decorator]
        async def follow_generation() -> None:
            await serving.follow(settings.generation_refresh_seconds)
    else:
        start_http_server(settings.worker_metrics_port, addr=settings.http_host)

    async def stop_api(*_: Any, **__: Any) -> None:
        """The API stops taking requests first (the consumer has just stopped fetching)."""
        if server is not None:
            server.should_exit = True
            await asyncio.sleep(0.2)

    app.on_before_shutdown.connect(stop_api)
    _tune_interpreter(settings)
    worker.execute_from_commandline()


def run_api(settings: Settings) -> None:
    """The read service alone; as read replica `settings.replica`, on its own index and a port it shares.

    A replica listens only once its index has caught up with the log
    (services/api/replica.py): until then the kernel hands every connection
    to the replicas that are serving.
    """

    async def main() -> None:
        fresh = not settings.qdrant_path.exists()  # before start() creates the shard
        runtime = Runtime.create(settings)
        await runtime.start()
        api, serving = read_service(runtime)
        follower = asyncio.create_task(serving.follow(settings.generation_refresh_seconds))
        balancing: asyncio.Task[None] | None = None
        try:
            sockets = None
            if settings.replica is not None:
                os.nice(settings.read_replica_nice)
                await serving.start_replica(fresh=fresh)
                sockets = [shared_port(settings.http_host, settings.http_port)]
            _tune_interpreter(settings)
            if settings.replica is not None and settings.replica_balance:
                board = Board(settings.data_dir / "replicas" / "connections")
                balance = ConnectionBalance(board, settings.replica, lambda: len(server.server_state.connections))
                served: ASGIApp = Rebalance(api, balance)
                balancing = asyncio.create_task(balance.run())
            else:
                served = api
            server = uvicorn.Server(server_config(served, settings))
            await server.serve(sockets=sockets)
        finally:
            if balancing is not None:
                balancing.cancel()
            follower.cancel()
            await serving.stop()
            await runtime.stop()

    _use_uvloop()
    tracing.configure("api")
    backlog.STAGES.share(late_mark(settings), publish_over=None)  # paced by the stages, wherever they run
    asyncio.run(main())
