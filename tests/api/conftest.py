"""The real read service on a real uvicorn server, over a real Runtime (embedded Postgres, Qdrant Edge).

The server runs in a thread with its own event loop, so tests talk to it
over HTTP like any client, and can pause Postgres underneath it. Kafka is a
socket that accepts connections and never answers: the worst case for the
readiness probe, which must still answer within its deadline.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Coroutine, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest
import uvicorn
from fastapi import FastAPI

from services.api.app import create_app
from services.api.health import Readiness
from services.api.server import server_config
from services.auth import ApiKey, KeyStore, Role, load_secret
from services.core.config import Settings
from services.runtime import Runtime
from tests.pg import PgServer, embedded_postgres

T = TypeVar("T")


class ServerThread(threading.Thread):
    """uvicorn + Runtime in a background thread; `start()` returns once it accepts requests."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(name="api-under-test", daemon=True)
        self.settings = settings
        # IPPROTO_TCP explicitly: asyncio sets TCP_NODELAY only on sockets that say so,
        # and with Nagle every keep-alive request would wait out a 40 ms delayed ACK.
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        self.sock.bind(("127.0.0.1", 0))
        self.port = int(self.sock.getsockname()[1])
        self.rt: Runtime | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.server: uvicorn.Server | None = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as exc:
            self.error = exc

    async def _serve(self) -> None:
        rt = Runtime.create(self.settings)
        await rt.start()
        self.rt = rt
        self.loop = asyncio.get_running_loop()
        config = server_config(create_app(rt, Readiness(rt)), self.settings, timeout_graceful_shutdown=5)
        self.server = uvicorn.Server(config)
        try:
            await self.server.serve(sockets=[self.sock])
        finally:
            await rt.stop()

    def wait_started(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not (self.server is not None and self.server.started):
            if self.error is not None or not self.is_alive():
                raise RuntimeError(f"API server did not start: {self.error!r}")
            if time.monotonic() > deadline:
                raise TimeoutError("API server did not start in time")
            time.sleep(0.05)

    def stop(self) -> None:
        if self.server is not None:
            self.server.should_exit = True
        self.join(30)
        self.sock.close()


@dataclass
class LiveApi:
    base_url: str
    client: httpx.Client
    pg: PgServer
    thread: ServerThread

    @property
    def rt(self) -> Runtime:
        assert self.thread.rt is not None
        return self.thread.rt

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 60) -> T:
        """Run a coroutine on the server's loop: the stores (pool, Qdrant shard) belong to it."""
        assert self.thread.loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self.thread.loop).result(timeout)

    def new_key(self, tenant: str | None, role: Role = Role.ADMIN, name: str = "test") -> tuple[ApiKey, str]:
        """A real key in the server's database (None tenant: an operator key): its record and the key."""
        return create_key(self.thread, tenant, role, name)

    @property
    def keys(self) -> KeyStore:
        return KeyStore(self.rt.pg)

    @property
    def app(self) -> FastAPI:
        assert self.thread.server is not None
        app = self.thread.server.config.app
        assert isinstance(app, FastAPI)
        return app


def create_key(thread: ServerThread, tenant: str | None, role: Role, name: str) -> tuple[ApiKey, str]:
    assert thread.rt is not None
    assert thread.loop is not None
    create = KeyStore(thread.rt.pg).create(load_secret(thread.settings), tenant_id=tenant, role=role, name=name)
    return asyncio.run_coroutine_threadsafe(create, thread.loop).result(60)


def bearer(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


@pytest.fixture(scope="session")
def silent_kafka() -> Iterator[str]:
    """A TCP port that completes handshakes (kernel backlog) and never says a word."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(64)
        yield f"127.0.0.1:{sock.getsockname()[1]}"


@pytest.fixture(scope="session")
def api_pg(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PgServer]:
    with embedded_postgres(Path(tmp_path_factory.mktemp("api-pg"))) as server:
        yield server


@pytest.fixture(scope="session")
def api(api_pg: PgServer, silent_kafka: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveApi]:
    settings = Settings(
        data_dir=Path(tmp_path_factory.mktemp("api-data")),
        pg_dsn=api_pg.database(),
        kafka_bootstrap=silent_kafka,
        embed_threads=1,
        # Short, so the revocation test need not wait out the default 5 s.
        auth_cache_seconds=1.0,
    )
    thread = ServerThread(settings)
    thread.start()
    try:
        thread.wait_started(120)
        base_url = f"http://127.0.0.1:{thread.port}"
        # Every test talks as the operator unless it sends its own Authorization header.
        _, operator = create_key(thread, None, Role.ADMIN, "api tests operator")
        with httpx.Client(base_url=base_url, timeout=30, headers=bearer(operator)) as client:
            yield LiveApi(base_url, client, api_pg, thread)
    finally:
        thread.stop()
