"""The OpenAI-compatible embedder against the fake server: batching, order, dimension, error kinds."""

from __future__ import annotations

import pytest

from services.core.errors import ConfigError, StoreRejected, StoreUnavailable
from services.embedding.openai_embedder import OpenAiEmbedder
from tests.llm.fake_openai import FakeOpenAI, Reply, _vector


def embedder(fake: FakeOpenAI, dimension: int = 8, batch_size: int = 2) -> OpenAiEmbedder:
    return OpenAiEmbedder(
        base_url=fake.base_url, model="fake-embed", dimension=dimension, batch_size=batch_size, timeout=2, max_retries=0
    )


def test_texts_are_sent_in_batches_and_come_back_in_order(fake: FakeOpenAI) -> None:
    texts = ["a", "bb", "ccc", "dddd", "eeeee"]
    vectors = embedder(fake).embed(texts)
    assert vectors == [_vector(t, 8) for t in texts]
    assert [r["input"] for r in fake.embed_requests] == [["a", "bb"], ["ccc", "dddd"], ["eeeee"]]
    assert {r["model"] for r in fake.embed_requests} == {"fake-embed"}
    assert {r["encoding_format"] for r in fake.embed_requests} == {"float"}
    assert embedder(fake).embed([]) == []


def test_a_wrong_dimension_holds_the_batch_and_fails_verify(fake: FakeOpenAI) -> None:
    wrong = embedder(fake, dimension=16)
    with pytest.raises(StoreUnavailable, match="dimension"):
        wrong.embed(["x"])  # never the DLQ: every good input would end there
    with pytest.raises(ConfigError, match="dimension"):
        wrong.verify()
    embedder(fake).verify()


def test_outages_are_transient_and_a_refused_text_is_bad_input(fake: FakeOpenAI) -> None:
    fake.embed_script.extend([Reply(status=503), Reply(status=429), Reply(status=401), Reply(status=400)])
    model = embedder(fake)
    for _ in range(3):
        with pytest.raises(StoreUnavailable):
            model.embed(["x"])
    with pytest.raises(StoreRejected):
        model.embed(["x" * 10])
