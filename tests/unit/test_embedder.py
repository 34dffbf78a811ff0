import json
from pathlib import Path

import numpy as np
import pytest

from services.embedding import CachedEmbedder, MiniLmEmbedder

REFERENCE = json.loads((Path(__file__).parent / "data" / "minilm_reference.json").read_text())


@pytest.fixture(scope="module")
def model() -> MiniLmEmbedder:
    return MiniLmEmbedder(threads=2)


def test_onnx_graph_matches_sentence_transformers(model: MiniLmEmbedder) -> None:
    ours = np.array(model.embed(REFERENCE["texts"]))
    ref = np.array(REFERENCE["vectors"])
    cosine = (ours * ref).sum(axis=1)
    assert model.dimension == 384
    assert cosine.min() > 0.9999, cosine


def test_batch_order_is_preserved_despite_length_sorting(model: MiniLmEmbedder) -> None:
    texts = ["a much longer sentence about coffee and mornings", "short", "medium length text"]
    together = model.embed(texts)
    alone = [model.embed([t])[0] for t in texts]
    assert np.allclose(together, alone, atol=1e-5)


def test_cache_only_sends_misses_to_the_model(model: MiniLmEmbedder) -> None:
    calls: list[list[str]] = []

    class Spy:
        name, dimension = model.name, model.dimension

        def embed(self, texts: list[str]) -> list[list[float]]:
            calls.append(list(texts))
            return model.embed(texts)

    cached = CachedEmbedder(Spy(), capacity=10)
    first = cached.embed(["Hello there", "coffee"])
    second = cached.embed(["hello   THERE", "tea"])
    assert calls == [["Hello there", "coffee"], ["tea"]]
    assert second[0] == first[0]
