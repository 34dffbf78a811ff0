from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.pg import PgServer, embedded_postgres


@pytest.fixture(scope="session")
def pg_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PgServer]:
    with embedded_postgres(Path(tmp_path_factory.mktemp("pg"))) as server:
        yield server


@pytest.fixture
def pg_dsn(pg_server: PgServer) -> str:
    """An empty database of its own for each test."""
    return pg_server.database()
