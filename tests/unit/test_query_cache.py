"""Recall's query-vector cache: exact-text LRU, single flight, batched misses, errors not cached."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence

import numpy as np
import pytest

from services.core.metrics import QUERY_CACHE
from services.embedding import CachedEmbedder, MiniLmEmbedder
from services.embedding.query_cache import QueryEmbeddings, for_model


class Gated:
    """A model whose calls are recorded and can be held, so a test decides when a miss finishes."""

    name, dimension = "gated", 3

    def __init__(self) -> None:
        self.calls: list[list[str]] = []
        self.open = threading.Event()
        self.open.set()
        self.fail_next = False

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.open.wait(10)
        self.calls.append(list(texts))
        if self.fail_next:
            self.fail_next = False
            raise RuntimeError("model down")
        return [[float(len(t)), float(sum(map(ord, t)) % 97), 1.0] for t in texts]


def _count(result: str) -> float:
    return QUERY_CACHE.labels(result=result)._value.get()


async def test_a_hit_never_reaches_the_model_and_the_key_is_the_exact_text() -> None:
    model = Gated()
    cache = QueryEmbeddings(model, capacity=10)
    first = await cache.embed("Where do I live?")
    hits = _count("hit")
    again = await cache.embed("Where do I live?")
    other = await cache.embed("where do I live?")
    assert again == first
    assert model.calls == [["Where do I live?"], ["where do I live?"]]
    assert _count("hit") == hits + 1
    assert other != first


async def test_the_cache_keeps_the_most_recently_used_within_its_capacity() -> None:
    model = Gated()
    cache = QueryEmbeddings(model, capacity=2)
    for text in ("a", "bb", "a", "ccc"):  # "a" was used after "bb": "bb" is the one to go
        await cache.embed(text)
    assert len(cache) == 2
    model.calls.clear()
    await cache.embed("a")
    await cache.embed("ccc")
    assert model.calls == []
    await cache.embed("bb")
    assert model.calls == [["bb"]]
    assert len(cache) == 2


async def test_concurrent_identical_misses_are_computed_once() -> None:
    model = Gated()
    model.open.clear()
    cache = QueryEmbeddings(model, capacity=10)
    joined = _count("joined")
    waiting = [asyncio.create_task(cache.embed("same question")) for _ in range(8)]
    await asyncio.sleep(0.05)
    model.open.set()
    vectors = await asyncio.gather(*waiting)
    assert model.calls == [["same question"]]
    assert all(v == vectors[0] for v in vectors)
    assert _count("joined") == joined + 7


async def test_misses_arriving_while_the_model_is_busy_go_to_it_as_one_batch() -> None:
    model = Gated()
    model.open.clear()
    cache = QueryEmbeddings(model, capacity=10)
    first = asyncio.create_task(cache.embed("first"))
    await asyncio.sleep(0.05)  # "first" is with the model now
    rest = [asyncio.create_task(cache.embed(f"query {i}")) for i in range(5)]
    await asyncio.sleep(0.01)
    model.open.set()
    await asyncio.gather(first, *rest)
    assert model.calls == [["first"], [f"query {i}" for i in range(5)]]


async def test_a_failed_miss_reaches_every_waiter_and_is_not_cached() -> None:
    model = Gated()
    model.open.clear()
    model.fail_next = True
    cache = QueryEmbeddings(model, capacity=10)
    waiting = [asyncio.create_task(cache.embed("q")) for _ in range(3)]
    await asyncio.sleep(0.05)
    model.open.set()
    results = await asyncio.gather(*waiting, return_exceptions=True)
    assert all(isinstance(r, RuntimeError) for r in results)
    assert len(cache) == 0
    assert await cache.embed("q") == [1.0, float(ord("q") % 97), 1.0]
    assert len(model.calls) == 2


async def test_a_waiter_cancelled_by_its_deadline_leaves_the_miss_to_the_others() -> None:
    model = Gated()
    model.open.clear()
    cache = QueryEmbeddings(model, capacity=10)
    impatient = asyncio.create_task(cache.embed("slow"))
    patient = asyncio.create_task(cache.embed("slow"))
    await asyncio.sleep(0.05)
    impatient.cancel()
    model.open.set()
    assert await patient == [4.0, float(sum(map(ord, "slow")) % 97), 1.0]
    with pytest.raises(asyncio.CancelledError):
        await impatient
    assert len(cache) == 1


async def test_a_caller_changing_its_vector_does_not_change_the_cache() -> None:
    cache = QueryEmbeddings(Gated(), capacity=10)
    mine = await cache.embed("text")
    mine[0] = 99.0
    assert (await cache.embed("text"))[0] == 4.0


async def test_capacity_zero_still_shares_misses_but_keeps_nothing() -> None:
    model = Gated()
    cache = QueryEmbeddings(model, capacity=0)
    await cache.embed("x")
    await cache.embed("x")
    assert len(cache) == 0
    assert len(model.calls) == 2


def test_one_cache_per_model_instance_and_it_skips_the_ingest_cache() -> None:
    inner = Gated()
    ingest = CachedEmbedder(inner, capacity=10)
    cache = for_model(ingest, 5)
    assert for_model(ingest, 5) is cache
    assert for_model(CachedEmbedder(inner, capacity=10), 5) is not cache
    assert cache.model_name == "gated"
    asyncio.run(cache.embed("only mine"))
    assert ingest.embed(["only mine"])
    assert inner.calls == [["only mine"], ["only mine"]]


async def test_cached_vectors_are_the_models_own() -> None:
    """float32 storage must not move a MiniLM vector: recall with and without the cache ranks the same."""
    model = MiniLmEmbedder(threads=1)
    cache = QueryEmbeddings(model, capacity=10)
    direct = np.asarray(model.embed(["what did I say about coffee?"])[0])
    miss = np.asarray(await cache.embed("what did I say about coffee?"))
    hit = np.asarray(await cache.embed("what did I say about coffee?"))
    assert np.array_equal(miss, direct)
    assert np.array_equal(hit, direct)
