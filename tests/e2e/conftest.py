from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.stack import Stack, embedded_stack


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with embedded_stack(Path(tmp_path_factory.mktemp("stack"))) as running:
        yield running
