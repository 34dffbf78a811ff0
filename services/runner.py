"""Process entry points: the worker (all agents), the read service, or both.

Both in one process is the embedded default: a Qdrant Edge shard has one owner.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Generator
from contextlib import contextmanager
from typing import Any

import faust
import uvicorn
from prometheus_client import start_http_server

from agents.app import build_app
from services.api.app import create_app
from services.api.health import Readiness
from services.config import Settings
from services.runtime import Runtime

log = logging.getLogger(__name__)


class _EmbeddedServer(uvicorn.Server):
    """uvicorn inside Faust's loop: Faust owns the signals, we stop the server."""

    @contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


def _uvicorn_config(app: Any, settings: Settings) -> uvicorn.Config:
    return uvicorn.Config(
        app, host=settings.http_host, port=settings.http_port, log_level="warning", access_log=False, lifespan="off"
    )


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


def run_worker(settings: Settings, *, with_api: bool) -> None:
    runtime = Runtime.create(settings)
    app, _topics = build_app(settings, runtime)
    worker = _Worker(app, loglevel=settings.log_level.upper(), quiet=True)
    worker.runtime = runtime
    worker.loop.run_until_complete(runtime.start())

    server = _EmbeddedServer(_uvicorn_config(create_app(runtime, Readiness(runtime)), settings)) if with_api else None
    if server is not None:

        @app.task  # type: ignore[untyped-decorator]
        async def serve_http() -> None:
            await server.serve()
    else:
        start_http_server(settings.worker_metrics_port, addr=settings.http_host)

    async def stop_api(*_: Any, **__: Any) -> None:
        """The API stops taking requests first (the consumer has just stopped fetching)."""
        if server is not None:
            server.should_exit = True
            await asyncio.sleep(0.2)

    app.on_before_shutdown.connect(stop_api)
    worker.execute_from_commandline()


def run_api(settings: Settings) -> None:
    async def main() -> None:
        runtime = Runtime.create(settings)
        await runtime.start()
        server = uvicorn.Server(_uvicorn_config(create_app(runtime, Readiness(runtime)), settings))
        try:
            await server.serve()
        finally:
            await runtime.stop()

    asyncio.run(main())
