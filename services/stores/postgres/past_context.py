"""The context legs of point-in-time recall, from Postgres (the index holds only what is active now).

Live recall has four legs (services.stores.vector); `MemoryReader.recall_as_of`
reads the two own ones from the rows supersession keeps. This reads the two
context ones the same way, over the same rows (memory_reads.ACTIVE_AT): the
best `limit` by cosine to the stored context embedding (pgvector), and the
best `limit` by words of the context and the text (full-text ts_rank, as the
own lexical leg; not BM25, as the index's). Only exchanges with context are
in them. Like the own legs, an exact scan of one user's rows: a past view is
an audit, not the hot path.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from schemas import MemoryRecord
from services.stores.postgres.memory_reads import ACTIVE_AT, ANY_WORD, as_of_params
from services.stores.postgres.pool import PgPool
from services.stores.postgres.records import RECORD_COLUMNS, record_from_row


@dataclass(frozen=True)
class PastContext:
    """Each context leg's (id, score), best first, and the records they name."""

    dense: list[tuple[str, float]] = field(default_factory=list)
    lexical: list[tuple[str, float]] = field(default_factory=list)
    records: dict[str, MemoryRecord] = field(default_factory=dict)


async def context_legs_as_of(
    pool: PgPool,
    tenant_id: str,
    user_id: str,
    query: Sequence[float],
    text: str,
    at: datetime,
    *,
    types: Sequence[str] = (),
    limit: int,
) -> PastContext:
    async with pool.connection("recall_as_of_context") as conn:
        cur = await conn.execute(
            f"""WITH visible AS (
                    SELECT {RECORD_COLUMNS}, context_embedding FROM memories
                    WHERE tenant_id = %(t)s AND user_id = %(u)s AND cardinality(context) > 0 AND {ACTIVE_AT}
                      AND (cardinality(%(types)s::text[]) = 0 OR type = ANY(%(types)s::text[]))
                ), dense AS (
                    SELECT id, 1 - (context_embedding <=> %(q)s) AS score FROM visible
                    WHERE context_embedding IS NOT NULL AND vector_dims(context_embedding) = vector_dims(%(q)s::vector)
                    ORDER BY context_embedding <=> %(q)s, id LIMIT %(k)s
                ), lexical AS (
                    SELECT v.id, ts_rank(d.doc, w.query, 1) AS score
                    FROM visible v, (SELECT {ANY_WORD} AS query) w,
                         LATERAL (SELECT to_tsvector('english', array_to_string(v.context, ' ') || ' ' || v.text)) d(doc)
                    WHERE numnode(w.query) > 0 AND d.doc @@ w.query
                    ORDER BY score DESC, v.id LIMIT %(k)s
                )
                SELECT v.*, d.score AS dense_score, l.score AS lexical_score
                FROM visible v LEFT JOIN dense d ON d.id = v.id LEFT JOIN lexical l ON l.id = v.id
                WHERE d.id IS NOT NULL OR l.id IS NOT NULL""",
            as_of_params(tenant_id, user_id, query, text, at, types, limit),
        )
        rows = await cur.fetchall()
    dense = sorted(((r["id"], float(r["dense_score"])) for r in rows if r["dense_score"] is not None), key=_best)
    lexical = sorted(((r["id"], float(r["lexical_score"])) for r in rows if r["lexical_score"] is not None), key=_best)
    return PastContext(dense, lexical, {r["id"]: record_from_row(r) for r in rows})


def _best(pair: tuple[str, float]) -> tuple[float, str]:
    return (-pair[1], pair[0])
