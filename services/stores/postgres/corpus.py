"""Per-tenant counts of hashed terms and sentences in turns (agents/corpus.py, agents/summarizer/salience.py)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from services.stores.postgres.pool import Conn, PgPool


class CorpusCounts:
    def __init__(self, pool: PgPool) -> None:
        self._pool = pool

    async def add(self, conn: Conn, tenant_id: str, counts: Mapping[int, int]) -> None:
        """Add bucket counts (agents.corpus.tally of the turns the window stage accepted) in the caller's transaction.

        Called for the turns the archive accepts, so a redelivered turn is not counted twice. One
        statement whatever the batch, rows locked in bucket order, so window workers of several
        processes never deadlock on a tenant's rows (they wait on its busiest ones until commit).
        """
        ordered = sorted((b, n) for b, n in counts.items() if n)
        if not ordered:
            return
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
