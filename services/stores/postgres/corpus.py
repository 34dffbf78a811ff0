"""Per-tenant counts of hashed terms and sentences in assistant turns (agents/summarizer/salience.py says why)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping

from services.stores.postgres.pool import Conn, PgPool


class CorpusCounts:
    def __init__(self, pool: PgPool) -> None:
        self._pool = pool

    async def add(self, conn: Conn, tenant_id: str, documents: Iterable[set[int]], documents_bucket: int) -> None:
        """Count each document's buckets once, and the documents in `documents_bucket`, in the caller's transaction.

        The window stage calls it for the assistant turns the archive accepts, so a redelivered turn is not
        counted twice. One statement whatever the batch, rows locked in bucket order, so window workers of
        several processes never deadlock on a tenant's rows (they wait on its busiest ones until commit).
        """
        counts: Counter[int] = Counter()
        n = 0
        for buckets in documents:
            counts.update(buckets)
            n += 1
        if not n:
            return
        counts[documents_bucket] += n
        ordered = sorted(counts.items())
        await conn.execute(
            """INSERT INTO corpus_counts (tenant_id, bucket, docs)
               SELECT %s, b, d FROM unnest(%s::integer[], %s::bigint[]) AS t(b, d) ORDER BY b
               ON CONFLICT (tenant_id, bucket) DO UPDATE SET docs = corpus_counts.docs + excluded.docs""",
            (tenant_id, [b for b, _ in ordered], [d for _, d in ordered]),
        )

    async def counts(self, tenant_id: str, buckets: Iterable[int]) -> Mapping[int, int]:
        async with self._pool.connection("corpus_counts") as conn:
            cur = await conn.execute(
                "SELECT bucket, docs FROM corpus_counts WHERE tenant_id = %s AND bucket = ANY(%s::integer[])",
                (tenant_id, sorted(set(buckets))),
            )
            return {int(row["bucket"]): int(row["docs"]) for row in await cur.fetchall()}
