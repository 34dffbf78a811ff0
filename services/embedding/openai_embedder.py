"""Embeddings from any OpenAI-compatible `/v1/embeddings` endpoint, as an `Embedder`.

Synchronous on purpose: the embedder stage and recall call `embed` from a
worker thread (`asyncio.to_thread`), like the local MiniLM. The dimension is
configuration (`embed_dimension`), checked on every answer: a model that
returns another size would corrupt the index, so that is an error, never a
silent truncation. Only a refusal of the text itself (400, 413, 422) raises
`StoreRejected` (the batch is retried item by item, the item that still fails
goes to the DLQ). Everything else raises `StoreUnavailable`, so the stage holds
the batch and retries: timeouts, 429, 5xx and connection errors, but also
401/403/404 and a wrong dimension, which are configuration mistakes that would
otherwise send every good input to the DLQ. `verify()` catches those at start.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import openai

from services.core import metrics
from services.core.errors import ConfigError, StoreError, StoreRejected, StoreUnavailable
from services.core.metrics import LLM as llm_metrics
from services.embedding.embedder import Vector

OPERATION = "embed"
# Statuses that blame the text, not the set-up.
_BAD_INPUT = frozenset({400, 413, 422})


class OpenAiEmbedder:
    """One request per `batch_size` texts, answers put back in input order."""

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        dimension: int,
        api_key: str = "unused",
        timeout: float = 20.0,
        batch_size: int = 64,
        max_retries: int = 2,
    ) -> None:
        self.name = model
        self.dimension = dimension
        self._batch_size = max(batch_size, 1)
        # The openai client's own backoff is fine here: the caller is a thread, and
        # StoreUnavailable after the last retry hands control to the stage's own retry loop.
        self._client = openai.OpenAI(base_url=base_url, api_key=api_key, timeout=timeout, max_retries=max_retries)

    def verify(self) -> None:
        """Fail fast at start-up on a wrong URL, key, model or dimension (ConfigError), not on the first batch."""
        try:
            self.embed(["memstream dimension probe"])
        except StoreError as exc:
            raise ConfigError(f"embeddings endpoint {self.name!r}: {exc}") from exc

    def embed(self, texts: Sequence[str]) -> list[Vector]:
        if not texts:
            return []
        started = time.perf_counter()
        out: list[Vector] = []
        for start in range(0, len(texts), self._batch_size):
            out.extend(self._embed_batch(list(texts[start : start + self._batch_size])))
        metrics.EMBED_TEXTS.inc(len(texts))
        metrics.EMBED_SECONDS.inc(time.perf_counter() - started)
        return out

    def _embed_batch(self, batch: list[str]) -> list[Vector]:
        started = time.perf_counter()
        try:
            response = self._client.embeddings.create(input=batch, model=self.name, encoding_format="float")
        except (openai.APITimeoutError, openai.APIConnectionError, openai.RateLimitError) as exc:
            raise StoreUnavailable(f"embeddings endpoint: {exc}") from exc
        except openai.APIStatusError as exc:
            error = StoreRejected if exc.status_code in _BAD_INPUT else StoreUnavailable
            raise error(f"embeddings endpoint: HTTP {exc.status_code}: {exc}") from exc
        finally:
            llm_metrics.LATENCY.labels(operation=OPERATION).observe(time.perf_counter() - started)
        if response.usage is not None:
            llm_metrics.TOKENS.labels(operation=OPERATION, kind="prompt").inc(response.usage.prompt_tokens or 0)
        return check_vectors(batch, [(d.index, d.embedding) for d in response.data], self.dimension)


def check_vectors(batch: Sequence[str], indexed: Sequence[tuple[int, list[float]]], dimension: int) -> list[Vector]:
    """Vectors in input order, one per text, each of the configured size.

    A malformed answer is the endpoint's fault, not the text's: StoreUnavailable.
    """
    by_index = dict(indexed)
    if sorted(by_index) != list(range(len(batch))):
        raise StoreUnavailable(f"embeddings endpoint answered indices {sorted(by_index)} for {len(batch)} texts")
    sizes = {len(v) for v in by_index.values()}
    if sizes != {dimension}:
        raise StoreUnavailable(f"embeddings endpoint returned dimension {sorted(sizes)}, configured {dimension}")
    return [[float(x) for x in by_index[i]] for i in range(len(batch))]
