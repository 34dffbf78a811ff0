"""Store tests share one migrated, open pool per test over a fresh database."""

from collections.abc import AsyncIterator

import pytest

from services.stores.postgres import PgPool, migrate


@pytest.fixture
async def pool(pg_dsn: str) -> AsyncIterator[PgPool]:
    await migrate(pg_dsn)
    pool = PgPool(pg_dsn, 2)
    await pool.open()
    yield pool
    await pool.close()
