from collections.abc import Iterator

import pytest

from tests.llm.fake_openai import FakeOpenAI, fake_openai


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with fake_openai() as server:
        yield server


# The store tests' migrated pool over a fresh database, for LLM stages that write Postgres.
from tests.stores.conftest import pool as pool  # noqa: E402
