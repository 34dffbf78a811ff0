"""Query vectors for recall: an LRU by exact text, one model call per distinct miss, misses batched.

Recall embeds one short text per request. Assistants ask the same thing
again (a retry, the same question in a loop, a dashboard), and the bench's
clients repeat queries, so a hit must cost a dictionary lookup on the event
loop, not a hop to a worker thread. Keys are the exact text: two spellings
that embed the same are two entries, but nothing that embeds differently
can ever share one. Each cache belongs to one model instance (`for_model`),
so the key is (model, text) by construction.

A miss is computed once however many requests ask for it meanwhile
(single-flight), and the misses that arrive while the model is busy go
to it together as one batch when it is free: on two cores eight queries in
one call cost far less than eight calls, and an idle service adds no wait.
A query's vector is the same whichever queries share its batch (the int8
model scales activations per token: services/embedding/minilm_graph.py).

Vectors are kept as float32 arrays (1.5 KB for MiniLM instead of 12 KB as a
list of floats), and every caller gets its own list: a caller that changes
what it got cannot change the cache.

Everything here runs on one event loop (the read service's); only the model
call leaves it, on a worker thread.
"""

from __future__ import annotations

import asyncio
import weakref
from collections import OrderedDict

import numpy as np
import numpy.typing as npt

from services.core.metrics import QUERY_BATCHES, QUERY_CACHE
from services.embedding.embedder import CachedEmbedder, Embedder, Vector, packed, unpacked


def _retrieve(future: asyncio.Future[Vector]) -> None:
    """A failed miss whose every waiter went away (deadline) must not be logged as never retrieved."""
    if not future.cancelled():
        future.exception()


class QueryEmbeddings:
    """The query-vector cache of one model; use `for_model` to share it within the process."""

    def __init__(self, model: Embedder, capacity: int, max_batch: int = 32) -> None:
        self._model = model
        self._capacity = max(0, capacity)
        self._max_batch = max(1, max_batch)
        self._cache: OrderedDict[str, npt.NDArray[np.float32]] = OrderedDict()
        self._inflight: dict[str, asyncio.Future[Vector]] = {}
        self._queued: list[str] = []
        self._runner: asyncio.Task[None] | None = None

    def __len__(self) -> int:
        return len(self._cache)

    @property
    def model_name(self) -> str:
        return self._model.name

    async def embed(self, text: str) -> Vector:
        """The text's vector: from the cache, from a miss already in flight, or from the model."""
        cached = self._cache.get(text)
        if cached is not None:
            self._cache.move_to_end(text)
            QUERY_CACHE.labels(result="hit").inc()
            return unpacked(cached)
        future = self._inflight.get(text)
        if future is None:
            QUERY_CACHE.labels(result="miss").inc()
            future = self._enqueue(text)
        else:
            QUERY_CACHE.labels(result="joined").inc()
        # A waiter that is cancelled (its request's deadline) leaves the shared miss running for the others.
        return await asyncio.shield(future)

    def _enqueue(self, text: str) -> asyncio.Future[Vector]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Vector] = loop.create_future()
        future.add_done_callback(_retrieve)
        self._inflight[text] = future
        self._queued.append(text)
        if self._runner is None or self._runner.done():
            self._runner = loop.create_task(self._drain(), name="query-embeddings")
        return future

    async def _drain(self) -> None:
        """Embed what is queued, a batch at a time, until nothing is; each batch is what waited for the last."""
        while self._queued:
            batch, self._queued = self._queued[: self._max_batch], self._queued[self._max_batch :]
            QUERY_BATCHES.inc()
            try:
                vectors = await asyncio.to_thread(self._model.embed, batch)
            except asyncio.CancelledError:  # the loop is closing: nobody is left to answer
                for text in [*batch, *self._queued]:
                    self._inflight.pop(text).cancel()
                self._queued = []
                raise
            except Exception as exc:  # every waiter of the batch gets the error; nothing is cached
                for text in batch:
                    self._inflight.pop(text).set_exception(exc)
                continue
            for text, vector in zip(batch, vectors, strict=True):
                self._store(text, packed(vector))
                self._inflight.pop(text).set_result(vector)

    def _store(self, text: str, vector: npt.NDArray[np.float32]) -> None:
        if self._capacity == 0:
            return
        self._cache[text] = vector
        self._cache.move_to_end(text)
        while len(self._cache) > self._capacity:
            self._cache.popitem(last=False)


_BY_MODEL: weakref.WeakKeyDictionary[Embedder, QueryEmbeddings] = weakref.WeakKeyDictionary()


def uncached(model: Embedder) -> Embedder:
    """The model behind the ingest cache: queries would only crowd out the texts that cache is for."""
    return model.inner if isinstance(model, CachedEmbedder) else model


def for_model(model: Embedder, capacity: int, max_batch: int = 32) -> QueryEmbeddings:
    """The process's query cache for this model instance, made on first use with `capacity` entries.

    Keyed by the instance, so a runtime that loads another model gets a new
    cache and a model that is dropped takes its cache with it.
    """
    found = _BY_MODEL.get(model)
    if found is None:
        found = _BY_MODEL[model] = QueryEmbeddings(uncached(model), capacity, max_batch)
    return found
