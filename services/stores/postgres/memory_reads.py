"""The read service's side of long-term memory. Every query is scoped by tenant and user."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any

import numpy as np
from psycopg.rows import args_row

from schemas import MemoryRecord, MemoryStatus, MemoryType
from schemas.memory import STANDING_CATEGORIES
from services.stores.fusion import session_in
from services.stores.postgres.pool import Conn, PgPool
from services.stores.postgres.records import RECORD_COLUMNS as _RECORD_COLUMNS
from services.stores.postgres.records import record_from_row
from services.stores.postgres.windows import WORKING_WINDOW_SQL

# Which rows were active memory at `%(at)s` (the rule of point-in-time recall, docs/usage/recall.md):
# observed by then, and either still active, or retired (superseded, merged; pruned: `updated_at` is when
# maintenance pruned it, nothing touches a pruned row after) only after it. Deleted rows, and any
# status this rule does not know, are never shown again: deleting is how a user takes something back.
ACTIVE_AT = """observed_at <= %(at)s AND CASE status
        WHEN 'active' THEN true
        WHEN 'superseded' THEN COALESCE(superseded_at, updated_at) > %(at)s
        WHEN 'merged' THEN COALESCE(superseded_at, updated_at) > %(at)s
        WHEN 'pruned' THEN updated_at > %(at)s
        ELSE false
    END"""
# Any of the query's words, English-stemmed like the index's BM25: plainto_tsquery joins its lexemes
# with ' & ' only (no other operator), so turning those into ' | ' is exactly "match any".
ANY_WORD = "replace(plainto_tsquery('english', %(text)s)::text, ' & ', ' | ')::tsquery"

# The reads of a recall (docs/usage/recall.md); each is scoped by tenant and user, each is one statement so
# `recall_reads` can send them together. Profile: keyed facts and preferences close to the query, scored
# by pgvector over one user's profile (a few hundred rows at most), then the standing preferences (a diet,
# an instruction: schemas.memory.STANDING_CATEGORIES) however far from it, the newest first.
_PROFILE_SQL = f"""WITH scored AS (
        SELECT {_RECORD_COLUMNS}, 1 - (embedding <=> %(q)s) AS similarity FROM memories
        WHERE tenant_id = %(t)s AND user_id = %(u)s AND status = 'active'
          AND type IN ('fact', 'preference') AND embedding IS NOT NULL
          AND vector_dims(embedding) = vector_dims(%(q)s::vector)
    )
    (SELECT * FROM scored WHERE similarity >= %(min)s ORDER BY similarity DESC LIMIT %(k)s)
    UNION ALL
    (SELECT * FROM scored WHERE similarity < %(min)s AND type = 'preference' AND category = ANY(%(standing)s)
     ORDER BY observed_at DESC, id LIMIT %(standing_k)s)"""
# At most this many standing preferences in one answer: the newest.
STANDING_LIMIT = 5
_STANDING = {"standing": list(STANDING_CATEGORIES), "standing_k": STANDING_LIMIT}
# Those of some ids (the index's hits) that are the user's and active now.
_ACTIVE_OF_IDS = "FROM memories WHERE tenant_id = %(t)s AND user_id = %(u)s AND id = ANY(%(ids)s) AND status = 'active'"
OPEN_QUESTIONS_SQL = f"""SELECT {_RECORD_COLUMNS} FROM memories
    WHERE tenant_id = %(t)s AND user_id = %(u)s AND type = 'question' AND status = 'active'
      AND question->>'state' = 'open'
    ORDER BY observed_at DESC, id LIMIT %(k)s"""


def as_of_params(
    tenant_id: str, user_id: str, query: Sequence[float], text: str, at: datetime, types: Sequence[str], limit: int
) -> dict[str, Any]:
    """The parameters of a point-in-time read (ACTIVE_AT, ANY_WORD): the own legs here, the context ones in
    past_context.py."""
    return {
        "t": tenant_id,
        "u": user_id,
        "at": at,
        "types": list(types),
        "q": np.asarray(query, dtype=np.float32),
        "text": text,
        "k": limit,
    }


def _profile(rows: list[dict[str, Any]]) -> list[tuple[MemoryRecord, float]]:
    return [(record_from_row(r), r["similarity"]) for r in rows]


@dataclass(frozen=True, slots=True)
class LiveHit:
    """An index hit as Postgres holds it now: what ranking and the answer show, and what fusion needs.

    Read from Postgres rather than the index's payload: the row is current (a
    fact superseded a moment ago is not among them; access is as of the last
    mark), and the round trip is made anyway, while reading payloads from
    the embedded engine is what a query costs most (services.stores.qdrant_edge_index).
    """

    id: str
    type: str
    text: str
    importance: float
    observed_at: datetime
    entities: list[str]
    source: dict[str, Any]  # Provenance as JSON
    compressed: bool
    has_context: bool  # in the index's context legs (an exchange with turns before it)
    access_count: int
    last_accessed_at: datetime | None

    @property
    def session_id(self) -> str | None:
        return session_in(self.source)

    @classmethod
    def of(cls, record: MemoryRecord) -> LiveHit:
        return cls(
            id=record.id,
            type=record.type.value,
            text=record.text,
            importance=record.importance,
            observed_at=record.observed_at,
            entities=record.entities,
            source=record.source.model_dump(mode="json"),
            compressed=record.compressed,
            has_context=bool(record.context),
            access_count=record.access_count,
            last_accessed_at=record.last_accessed_at,
        )


# LiveHit's fields as columns, where a field is not a column of its own name.
_HIT_EXPRESSIONS = {"source": "provenance", "has_context": "cardinality(context) > 0"}
# The index's hits as Postgres holds them now: the index answers ids and scores only. Access counts
# live here alone: re-indexing a point on every recall mark would make reads cost writes. The columns
# come in LiveHit's field order, so each row is LiveHit's arguments as they are (no dict per row).
_HITS_SQL = f"""SELECT {", ".join(_HIT_EXPRESSIONS.get(f.name, f.name) for f in fields(LiveHit))} {_ACTIVE_OF_IDS}"""
_LIVE_HIT_ROWS = args_row(LiveHit)


def _live_hits(rows: list[LiveHit]) -> dict[str, LiveHit]:
    return {hit.id: hit for hit in rows}


async def _rows(conn: Conn, sql: str, params: dict[str, Any]) -> list[dict[str, Any]]:
    cur = await conn.execute(sql, params)
    return await cur.fetchall()


@dataclass(frozen=True)
class RecallReads:
    """What a recall needs from the source of truth, read in one round trip (`MemoryReader.recall_reads`).

    `hits`: of the index's hits, those Postgres still holds as active, by id; `profile`: facts and
    preferences close to the query, with their cosine; `questions`: the open questions, newest first
    (empty when not asked for); `window`: the session's row (None when not asked for or unknown).
    """

    hits: dict[str, LiveHit]
    profile: list[tuple[MemoryRecord, float]]
    questions: list[MemoryRecord]
    window: dict[str, Any] | None


@dataclass(frozen=True)
class PastMatch:
    """A memory as it stood at some time, with what each recall leg thought of it.

    `similarity`: cosine to the query (None without a comparable embedding);
    `dense`: among the dense leg's best; `text_rank`: Postgres ts_rank when among the lexical leg's best.
    """

    record: MemoryRecord
    similarity: float | None
    dense: bool
    text_rank: float | None


class MemoryReader:
    """There is deliberately no query by memory id alone."""

    def __init__(self, pool: PgPool) -> None:
        self._pool = pool

    async def active_profile(
        self, tenant_id: str, user_id: str, query: Sequence[float], min_similarity: float, limit: int
    ) -> list[tuple[MemoryRecord, float]]:
        """Keyed facts and preferences close to the query, with their cosine similarity.

        Exact rows from the source of truth (the index may lag), scored by
        pgvector over one user's profile: a few hundred rows at most.
        """
        async with self._pool.connection("active_profile") as conn:
            params = {"t": tenant_id, "u": user_id, "q": np.asarray(query, dtype=np.float32)}
            return _profile(await _rows(conn, _PROFILE_SQL, {**params, **_STANDING, "min": min_similarity, "k": limit}))

    async def recall_reads(
        self,
        tenant_id: str,
        user_id: str,
        *,
        hit_ids: Sequence[str],
        query: Sequence[float],
        min_similarity: float,
        profile_limit: int,
        questions_limit: int = 0,
        session_id: str | None = None,
    ) -> RecallReads:
        """The index's hits as they are now, the close profile, the open questions and the working window.

        One connection, one round trip: the statements go out together in
        pipeline mode and the answers come back together. Four round trips
        cost four waits on the server and four trips through the pool, which
        under concurrent recalls is most of what Postgres adds to one.
        `questions_limit=0` and `session_id=None` leave those reads out.
        """
        params = {"t": tenant_id, "u": user_id}
        async with self._pool.connection("recall_reads") as conn:
            async with conn.pipeline():
                hits = None
                if hit_ids:
                    hits = await conn.cursor(row_factory=_LIVE_HIT_ROWS).execute(
                        _HITS_SQL, {**params, "ids": list(hit_ids)}
                    )
                vec = np.asarray(query, dtype=np.float32)
                profile = await conn.execute(
                    _PROFILE_SQL, {**params, **_STANDING, "q": vec, "min": min_similarity, "k": profile_limit}
                )
                questions = (
                    await conn.execute(OPEN_QUESTIONS_SQL, {**params, "k": questions_limit})
                    if questions_limit > 0
                    else None
                )
                window = (
                    await conn.execute(WORKING_WINDOW_SQL, {**params, "s": session_id})
                    if session_id is not None
                    else None
                )
            return RecallReads(
                hits=_live_hits(await hits.fetchall()) if hits is not None else {},
                profile=_profile(await profile.fetchall()),
                questions=[record_from_row(r) for r in await questions.fetchall()] if questions is not None else [],
                window=await window.fetchone() if window is not None else None,
            )

    async def recall_as_of(
        self,
        tenant_id: str,
        user_id: str,
        query: Sequence[float],
        text: str,
        at: datetime,
        *,
        types: Sequence[str] = (),
        limit: int,
    ) -> list[PastMatch]:
        """The user's memories as they stood at `at` that match the query: the best `limit` by cosine
        (pgvector) and the best `limit` by words (full-text ts_rank), for score fusion by the caller.

        The recall index holds only what is active now, so a past state is read
        here, from the rows supersession keeps. Both legs are exact scans of
        one user's rows: a point-in-time read is an audit, not the hot path.
        """
        async with self._pool.connection("recall_as_of") as conn:
            cur = await conn.execute(
                f"""WITH visible AS (
                        SELECT {_RECORD_COLUMNS}, embedding FROM memories
                        WHERE tenant_id = %(t)s AND user_id = %(u)s AND {ACTIVE_AT}
                          AND (cardinality(%(types)s::text[]) = 0 OR type = ANY(%(types)s::text[]))
                    ), dense AS (
                        SELECT id FROM visible
                        WHERE embedding IS NOT NULL AND vector_dims(embedding) = vector_dims(%(q)s::vector)
                        ORDER BY embedding <=> %(q)s, id LIMIT %(k)s
                    ), lexical AS (
                        SELECT v.id, ts_rank(to_tsvector('english', v.text), w.query, 1) AS rank
                        FROM visible v, (SELECT {ANY_WORD} AS query) w
                        WHERE numnode(w.query) > 0 AND to_tsvector('english', v.text) @@ w.query
                        ORDER BY rank DESC, v.id LIMIT %(k)s
                    )
                    SELECT v.*, d.id IS NOT NULL AS in_dense, l.rank AS text_rank,
                      CASE WHEN v.embedding IS NOT NULL AND vector_dims(v.embedding) = vector_dims(%(q)s::vector)
                        THEN 1 - (v.embedding <=> %(q)s) END AS similarity
                    FROM visible v LEFT JOIN dense d ON d.id = v.id LEFT JOIN lexical l ON l.id = v.id
                    WHERE d.id IS NOT NULL OR l.id IS NOT NULL""",
                as_of_params(tenant_id, user_id, query, text, at, types, limit),
            )
            return [
                PastMatch(record_from_row(r), r["similarity"], bool(r["in_dense"]), r["text_rank"])
                for r in await cur.fetchall()
            ]

    async def list_memories(
        self,
        tenant_id: str,
        user_id: str,
        *,
        type_: MemoryType | None,
        status: MemoryStatus | None,
        limit: int,
        offset: int,
        types: Sequence[str] = (),
        since: datetime | None = None,
        until: datetime | None = None,
        as_of: datetime | None = None,
    ) -> list[MemoryRecord]:
        """A user's memories, oldest observed first: of `type_` and of any of `types` (a layer is a set of
        types; empty: all), observed in [since, until), and with `as_of` only those that were active memory
        then (ACTIVE_AT, the rule of point-in-time recall)."""
        async with self._pool.connection("list_memories") as conn:
            cur = await conn.execute(
                f"""SELECT {_RECORD_COLUMNS} FROM memories WHERE tenant_id = %(t)s AND user_id = %(u)s
                    AND (%(type)s::text IS NULL OR type = %(type)s)
                    AND (cardinality(%(types)s::text[]) = 0 OR type = ANY(%(types)s::text[]))
                    AND (%(status)s::text IS NULL OR status = %(status)s)
                    AND (%(since)s::timestamptz IS NULL OR observed_at >= %(since)s)
                    AND (%(until)s::timestamptz IS NULL OR observed_at < %(until)s)
                    AND (%(at)s::timestamptz IS NULL OR ({ACTIVE_AT}))
                    ORDER BY observed_at, id LIMIT %(k)s OFFSET %(o)s""",
                {
                    "t": tenant_id,
                    "u": user_id,
                    "type": type_,
                    "types": list(types),
                    "status": status,
                    "since": since,
                    "until": until,
                    "at": as_of,
                    "k": limit,
                    "o": offset,
                },
            )
            return [record_from_row(r) for r in await cur.fetchall()]

    async def history(self, tenant_id: str, user_id: str, memory_id: str) -> list[MemoryRecord]:
        """The supersession chain through `memory_id`, oldest first."""
        async with self._pool.connection("history") as conn:
            cur = await conn.execute(
                f"""WITH RECURSIVE back AS (
                      SELECT {_RECORD_COLUMNS} FROM memories WHERE tenant_id = %(t)s AND user_id = %(u)s AND id = %(id)s
                      UNION
                      SELECT m.id, m.tenant_id, m.user_id, m.type, m.text, m.content_hash, m.category, m.key_name, m.value,
                        m.importance, m.confidence, m.status, m.observed_at, m.created_at, m.updated_at, m.superseded_at,
                        m.superseded_by, m.provenance, m.entities, m.access_count, m.reinforcement_count, m.version,
                        m.last_accessed_at, m.compressed, m.question, m.context
                      FROM memories m JOIN back b ON m.superseded_by = b.id OR m.id = b.superseded_by
                      WHERE m.tenant_id = %(t)s AND m.user_id = %(u)s
                    ) SELECT * FROM back ORDER BY observed_at, created_at""",
                {"t": tenant_id, "u": user_id, "id": memory_id},
            )
            return [record_from_row(r) for r in await cur.fetchall()]

    async def counts_by_type_status(self) -> list[tuple[str, str, int]]:
        async with self._pool.connection("counts") as conn:
            cur = await conn.execute("SELECT type, status, count(*) AS n FROM memories GROUP BY type, status")
            return [(r["type"], r["status"], int(r["n"])) for r in await cur.fetchall()]


@dataclass(frozen=True, slots=True)
class UserCounts:
    """One user of a tenant: how many memories they hold, by type and by status."""

    user_id: str
    total: int
    by_type: dict[str, int]
    by_status: dict[str, int]


@dataclass(frozen=True, slots=True)
class SourceTurn:
    """A turn a memory was derived from, as the archive (table `turns`) holds it."""

    event_id: str
    session_id: str
    role: str
    content: str
    ts: datetime


async def tenant_users(pool: PgPool, tenant_id: str, *, limit: int, offset: int) -> list[UserCounts]:
    """A tenant's users (those holding any memory), by id, with their counts: a tenant-level listing."""
    async with pool.connection("tenant_users") as conn:
        cur = await conn.execute(
            """WITH page AS (
                   SELECT DISTINCT user_id FROM memories WHERE tenant_id = %(t)s ORDER BY user_id
                   LIMIT %(k)s OFFSET %(o)s
               )
               SELECT m.user_id, m.type, m.status, count(*) AS n FROM memories m JOIN page p USING (user_id)
               WHERE m.tenant_id = %(t)s GROUP BY m.user_id, m.type, m.status ORDER BY m.user_id""",
            {"t": tenant_id, "k": limit, "o": offset},
        )
        rows = await cur.fetchall()
    users: dict[str, UserCounts] = {}
    for r in rows:
        held = users.setdefault(r["user_id"], UserCounts(r["user_id"], 0, {}, {}))
        n = int(r["n"])
        held.by_type[r["type"]] = held.by_type.get(r["type"], 0) + n
        held.by_status[r["status"]] = held.by_status.get(r["status"], 0) + n
        users[r["user_id"]] = UserCounts(held.user_id, held.total + n, held.by_type, held.by_status)
    return list(users.values())


async def memory_with_sources(
    pool: PgPool, tenant_id: str, user_id: str, memory_id: str
) -> tuple[MemoryRecord, list[SourceTurn]] | None:
    """One memory of a user and the archived turns its provenance names (those still archived), in turn order."""
    async with pool.connection("memory_with_sources") as conn:
        cur = await conn.execute(
            f"SELECT {_RECORD_COLUMNS} FROM memories WHERE tenant_id = %s AND user_id = %s AND id = %s",
            (tenant_id, user_id, memory_id),
        )
        row = await cur.fetchone()
        if row is None:
            return None
        record = record_from_row(row)
        cur = await conn.execute(
            """SELECT event_id, session_id, role, content, ts FROM turns
               WHERE tenant_id = %s AND user_id = %s AND event_id = ANY(%s)
               ORDER BY session_id, turn_index, ts, event_id""",
            (tenant_id, user_id, list(record.source.event_ids)),
        )
        turns = [SourceTurn(**r) for r in await cur.fetchall()]
    return record, turns
