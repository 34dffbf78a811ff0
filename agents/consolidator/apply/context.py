"""The batch context: what one batch's decisions share (its lookups, what it has written so far)."""

from __future__ import annotations

import numpy as np

from agents.consolidator import importance as imp
from agents.consolidator.merge import MERGE_TYPES, BatchView, Similar
from schemas import EmbeddedCandidate, MemoryRecord, MemoryType
from services.stores.postgres import Conn, MemoryWriter
from services.stores.postgres.memory_writes import Probe

Scope = tuple[str, str, MemoryType]


class BatchContext:
    """What one batch's decisions share: the batch-level lookups and what the batch has written.

    Built with two queries for the whole batch (nearest mergeable neighbours,
    per-type centroids), never one per candidate.
    """

    def __init__(self, merge_similarity: float | None, min_importance: float) -> None:
        self.merge_similarity = merge_similarity
        self.min_importance = min_importance
        self.view = BatchView()
        self.nearest: dict[int, list[Similar]] = {}
        self.centroids: dict[Scope, imp.Centroid] = {}

    @classmethod
    async def load(
        cls,
        pg: MemoryWriter,
        conn: Conn,
        batch: list[EmbeddedCandidate],
        merge_similarity: float | None,
        min_importance: float,
    ) -> BatchContext:
        ctx = cls(merge_similarity, min_importance)
        mergeable = [i for i, item in enumerate(batch) if item.candidate.type in MERGE_TYPES]
        if merge_similarity is not None and mergeable:
            probes = [_probe(batch[i]) for i in mergeable]
            found = await pg.nearest_batch(conn, probes)
            ctx.nearest = {
                mergeable[pos]: [Similar(n.record, n.similarity, n.vector) for n in hits] for pos, hits in found.items()
            }
        by_dim: dict[int, set[Scope]] = {}
        for item in batch:
            by_dim.setdefault(len(item.vector), set()).add(_scope(item))
        for dim, scopes in by_dim.items():
            for scope, (total, count) in (await pg.centroids(conn, sorted(scopes), dim)).items():
                ctx.centroids[scope] = imp.Centroid(total, count)
        return ctx

    def importance(self, item: EmbeddedCandidate) -> float:
        return imp.importance(item.candidate, item.vector, self.centroids.get(_scope(item)))

    def added(self, item: EmbeddedCandidate, record: MemoryRecord) -> None:
        """A new active memory: later candidates of the batch see it (merge target, centroid)."""
        self.view.wrote(record, item.vector)
        scope = _scope(item)
        if scope in self.centroids and len(self.centroids[scope].total) == len(item.vector):
            self.centroids[scope].add(item.vector)
        else:
            self.centroids[scope] = imp.Centroid(np.asarray(item.vector, dtype=np.float64), 1)


def _scope(item: EmbeddedCandidate) -> Scope:
    return (item.tenant_id, item.user_id, item.candidate.type)


def _probe(item: EmbeddedCandidate) -> Probe:
    return Probe(item.tenant_id, item.user_id, item.candidate.type, item.vector)
