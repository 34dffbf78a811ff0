"""The connection pool every Postgres store shares, and the one place errors are classified."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import orjson
from pgvector.psycopg import register_vector_async
from psycopg import AsyncConnection
from psycopg.rows import dict_row
from psycopg.types.json import set_json_loads
from psycopg_pool import AsyncConnectionPool

from services.core import metrics
from services.stores.postgres.errors import classify

Conn = AsyncConnection[dict[str, Any]]


class PgPool:
    """Connections for the stores; every failure leaves as StoreUnavailable or StoreRejected.

    Timeouts are short on purpose: an outage must surface in seconds so the
    read service can answer 503 and a stage can back off, not hang.
    """

    def __init__(self, dsn: str, size: int, *, connect_timeout: float = 2.0, pool_timeout: float = 2.0) -> None:
        self._pool: AsyncConnectionPool[Conn] = AsyncConnectionPool(
            dsn,
            min_size=1,
            max_size=size,
            open=False,
            timeout=pool_timeout,
            kwargs={
                "row_factory": dict_row,
                "connect_timeout": max(1, round(connect_timeout)),
                # A peer that vanished (network partition, host gone) drops the
                # connection in ~15 s instead of hanging a query forever.
                "keepalives": 1,
                "keepalives_idle": 5,
                "keepalives_interval": 2,
                "keepalives_count": 5,
            },
            configure=self._configure,
        )

    @staticmethod
    async def _configure(conn: Conn) -> None:
        await register_vector_async(conn)
        # JSON read back is JSON memstream wrote, parsed by orjson on the way in: orjson reads it alike, 5x faster.
        set_json_loads(orjson.loads, conn)
        await conn.set_autocommit(True)

    async def open(self) -> None:
        await self._pool.open(wait=True, timeout=30.0)

    async def close(self) -> None:
        await self._pool.close()

    @asynccontextmanager
    async def connection(self, operation: str) -> AsyncIterator[Conn]:
        started = time.perf_counter()
        try:
            async with self._pool.connection() as conn:
                yield conn
        except Exception as exc:
            error = classify(exc, operation)
            if error is None:
                raise
            metrics.STORE_ERRORS.labels(store="postgres", operation=operation).inc()
            raise error from exc
        finally:
            metrics.STORE_LATENCY.labels(store="postgres", operation=operation).observe(time.perf_counter() - started)

    @asynccontextmanager
    async def transaction(self, operation: str) -> AsyncIterator[Conn]:
        async with self.connection(operation) as conn, conn.transaction():
            yield conn

    async def ping(self) -> bool:
        async with self.connection("ping") as conn:
            await conn.execute("SELECT 1")
        return True
