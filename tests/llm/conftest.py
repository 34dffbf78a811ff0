from collections.abc import Iterator

import pytest

from tests.llm.fake_openai import FakeOpenAI, fake_openai


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with fake_openai() as server:
        yield server
