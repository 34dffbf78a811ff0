import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.embedding import CachedEmbedder, MiniLmEmbedder
from services.embedding.embedder import length_buckets

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


def test_int8_vectors_stay_close_to_float32_and_rank_alike(model: MiniLmEmbedder) -> None:
    """The pipeline's default model: every vector near the reference, and each query finds the same text."""
    int8 = MiniLmEmbedder(threads=2, quantized=True)
    assert (int8.name, model.name) == ("all-MiniLM-L6-v2-int8", "all-MiniLM-L6-v2")
    texts = REFERENCE["texts"]
    quantized, ref = np.array(int8.embed(texts)), np.array(REFERENCE["vectors"])
    cosine = (quantized * ref).sum(axis=1)
    assert cosine.min() > 0.97, cosine
    queries = ["where does Ana live", "what coffee do I like", "a fox jumping over a dog", "hi there"]
    for vectors in (np.array(model.embed(texts)), quantized):
        assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    float_order = (np.array(model.embed(queries)) @ ref.T).argmax(axis=1)
    int8_order = (np.array(int8.embed(queries)) @ quantized.T).argmax(axis=1)
    assert float_order.tolist() == int8_order.tolist() == [1, 0, 3, 2]


def test_an_int8_vector_does_not_depend_on_the_texts_embedded_with_it() -> None:
    """Activation scales are per token: with ORT's per-tensor scale a text's vector moved with its batch
    (cosine 0.95 against the same text alone), so a memory's or a query's vector depended on what else was
    embedded at that moment, and a rebuild's differed from the live one's."""
    int8 = MiniLmEmbedder(threads=2, quantized=True)
    texts = [
        "where does the user live?",
        "what does the user drink?",
        "I LIVE IN PUNE!!! 2026-11-28 12:00 #nurse @home $$$ 100%",
        "We went hiking near the glacier lake and it rained all afternoon.",
        "My favorite music is late baroque chamber music, mostly Telemann.",
    ]
    together = np.array(int8.embed(texts))
    for i, text in enumerate(texts):
        alone = np.array(int8.embed([text])[0])
        beside_one = np.array(int8.embed([text, texts[(i + 2) % len(texts)]])[0])
        assert together[i] @ alone > 0.99999, text
        assert beside_one @ alone > 0.99999, text


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


def test_a_cached_vector_is_compact_and_answers_as_the_miss_did() -> None:
    """A list of 384 Python floats takes 12 KB: 50,000 of them were most of a worker's growth over an hour."""
    import random
    import tracemalloc

    rng = random.Random(7)

    class Wide:
        name, dimension = "wide", 384

        def embed(self, texts: list[str]) -> list[list[float]]:
            return [[float(np.float32(rng.uniform(-1, 1))) for _ in range(384)] for _ in texts]

    cached = CachedEmbedder(Wide(), capacity=1_000)
    tracing = tracemalloc.is_tracing()
    if not tracing:
        tracemalloc.start()
    try:
        base, _ = tracemalloc.get_traced_memory()
        misses = [cached.embed([f"text {i}"])[0] for i in range(1_000)]
        held, _ = tracemalloc.get_traced_memory()
        missed = misses[3]
        del misses
        kept, _ = tracemalloc.get_traced_memory()
    finally:
        if not tracing:
            tracemalloc.stop()
    assert held - base > 10_000_000  # what the callers' own lists take
    assert kept - base < 2_500_000  # what the cache keeps of them: ~1.6 KB a vector
    hit = cached.embed(["text 3"])[0]
    again = cached.embed(["text 3"])[0]
    assert hit == again == missed
    assert hit is not again
    hit[0] = 99.0
    assert cached.embed(["text 3"])[0] == again


@given(st.lists(st.integers(1, 256), max_size=300), st.integers(1, 64))
def test_length_buckets_cover_every_text_once_within_batch_and_stretch(lengths: list[int], max_batch: int) -> None:
    buckets = length_buckets(lengths, max_batch)
    flat = [i for b in buckets for i in b]
    assert sorted(flat) == list(range(len(lengths)))
    for bucket in buckets:
        assert 1 <= len(bucket) <= max_batch
        sizes = [lengths[i] for i in bucket]
        assert max(sizes) <= 1.5 * max(min(sizes), 8)


def test_short_texts_are_not_batched_with_a_long_one() -> None:
    buckets = length_buckets([10, 12, 250, 11], max_batch=64)
    assert sorted(map(sorted, buckets)) == [[0, 1, 3], [2]]


def test_a_full_cache_shared_by_threads_stays_consistent() -> None:
    """Four threads over a full cache: the unlocked version raised thousands of KeyErrors here."""
    from concurrent.futures import ThreadPoolExecutor

    class Cheap:
        name, dimension = "cheap", 2

        def embed(self, texts: list[str]) -> list[list[float]]:
            return [[float(len(t)), 1.0] for t in texts]

    cached = CachedEmbedder(Cheap(), capacity=50)

    def work(seed: int) -> int:
        wrong = 0
        for i in range(2_000):
            texts = [f"text {(seed * 7919 + i * j) % 300}" for j in range(5)]
            got = cached.embed(texts)
            wrong += sum(vec != [float(len(t)), 1.0] for t, vec in zip(texts, got, strict=True))
        return wrong

    with ThreadPoolExecutor(4) as pool:
        assert sum(pool.map(work, range(4))) == 0
    assert len(cached._cache) <= 50
