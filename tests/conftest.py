"""Session fixtures, and the `stack` marker that separates the fast lane from tests that start servers.

A test is marked `stack` when it starts an embedded Postgres, broker or whole
stack: through a fixture that does (any fixture depending on one of
STACK_FIXTURES counts too), or because its module imports one of the
starters in STARTERS (the e2e files start their own stacks in module
fixtures). Nobody keeps a list of files: `pytest -m "not stack"` is the
fast lane (`make test-fast`).
"""

from collections.abc import Iterator
from pathlib import Path

import pytest

from ops.embedded.broker import broker_argv, broker_child, gate_child, kafka_store_child
from ops.embedded.postgres import postgres_child
from tests.pg import PgServer, embedded_postgres
from tests.stack import embedded_stack

# Fixtures that start a server; every fixture or test that depends on one needs it too.
# (emulated_cpu: the native-binary checks run Postgres, tansu and Qdrant under qemu.)
STACK_FIXTURES = frozenset({"pg_server", "api_pg", "stack", "emulated_cpu"})
# Functions that start a server; a test module that imports one starts it somewhere.
STARTERS = (embedded_stack, embedded_postgres, postgres_child, broker_argv, broker_child, gate_child, kafka_store_child)


def _starts_servers(item: pytest.Item) -> bool:
    if STACK_FIXTURES.intersection(getattr(item, "fixturenames", ())):
        return True
    if item.get_closest_marker("e2e") is not None:
        return True
    module = getattr(item, "module", None)
    names = vars(module).values() if module is not None else ()
    return any(value is starter for value in names for starter in STARTERS)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if _starts_servers(item):
            item.add_marker(pytest.mark.stack)


@pytest.fixture(scope="session")
def pg_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PgServer]:
    with embedded_postgres(Path(tmp_path_factory.mktemp("pg"))) as server:
        yield server


@pytest.fixture
def pg_dsn(pg_server: PgServer) -> str:
    """An empty database of its own for each test."""
    return pg_server.database()
