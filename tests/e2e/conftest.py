from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.stack import Stack, embedded_stack


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    # Fast gauges so the metrics test need not wait for the default timers.
    fast = {"MEMSTREAM_GAUGE_REFRESH_SECONDS": "2", "MEMSTREAM_LAG_REFRESH_SECONDS": "1"}
    with embedded_stack(Path(tmp_path_factory.mktemp("stack")), extra_env=fast) as running:
        yield running
