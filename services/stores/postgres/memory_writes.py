"""The consolidator's side of long-term memory: lookups and upserts inside its batch transaction."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from psycopg.types.json import Jsonb

from schemas import MemoryRecord, MemoryType
from services.core.errors import StoreRejected
from services.stores.postgres.pool import Conn
from services.stores.postgres.records import RECORD_COLUMNS as _RECORD_COLUMNS
from services.stores.postgres.records import record_from_row, vector_floats

# The types a merge may touch; migration 004's partial index repeats this list.
MERGE_TYPES_SQL = "('fact', 'preference', 'semantic', 'pattern')"


@dataclass(frozen=True)
class Probe:
    """One candidate's scope and vector, for the batch lookups."""

    tenant_id: str
    user_id: str
    type_: MemoryType
    vector: Sequence[float]


@dataclass(frozen=True)
class Nearby:
    record: MemoryRecord
    similarity: float
    vector: list[float]


def _floats(value: object) -> list[float]:
    floats = vector_floats(value)
    if floats is None:
        raise ValueError("a neighbour row without an embedding")
    return floats


def _vector_literal(vector: Sequence[float]) -> str:
    return "[" + ",".join(repr(float(x)) for x in vector) + "]"


class MemoryWriter:
    """Stateless: every call runs on the caller's connection, in the caller's transaction."""

    async def neighbours(
        self,
        conn: Conn,
        tenant_id: str,
        user_id: str,
        memory_id: str,
        type_: MemoryType,
        digest: str,
        fact_key: tuple[str, str] | None,
    ) -> dict[str, MemoryRecord]:
        """The rows a consolidation decision needs, in one round trip.

        Keys: "id" (same id, any status), "content" (active, same type and
        content hash), "fact" (the active fact with this category/key).
        """
        category, key_name = fact_key or (None, None)
        cur = await conn.execute(
            f"""SELECT 'id' AS hit, {_RECORD_COLUMNS} FROM memories
                    WHERE tenant_id = %(t)s AND user_id = %(u)s AND id = %(id)s
                UNION ALL (SELECT 'content', {_RECORD_COLUMNS} FROM memories
                    WHERE tenant_id = %(t)s AND user_id = %(u)s AND type = %(type)s AND content_hash = %(hash)s
                      AND status = 'active' LIMIT 1)
                UNION ALL SELECT 'fact', {_RECORD_COLUMNS} FROM memories
                    WHERE tenant_id = %(t)s AND user_id = %(u)s AND type = 'fact' AND category = %(cat)s
                      AND key_name = %(key)s AND status = 'active'""",
            {
                "t": tenant_id,
                "u": user_id,
                "id": memory_id,
                "type": type_.value,
                "hash": digest,
                "cat": category,
                "key": key_name,
            },
        )
        return {row["hit"]: record_from_row(row) for row in await cur.fetchall()}

    async def nearest_batch(self, conn: Conn, probes: Sequence[Probe], limit: int = 3) -> dict[int, list[Nearby]]:
        """For each probe (by position), its `limit` nearest active memories of the same scope and type.

        One query for the whole batch: a LATERAL nearest-neighbour scan per
        probe. For 384-dimension vectors it uses the HNSW expression index of
        migration 004 (same expression, same predicate), with an iterative scan
        so the tenant/user filter cannot starve it; only rows of the probe's
        dimension are compared, so a model change never mixes vector spaces.
        Only mergeable types are looked up.
        """
        by_dim: dict[int, list[int]] = {}
        for i, probe in enumerate(probes):
            by_dim.setdefault(len(probe.vector), []).append(i)
        found: dict[int, list[Nearby]] = {}
        if by_dim:
            await conn.execute("SET LOCAL hnsw.iterative_scan = strict_order")
        for dim, positions in sorted(by_dim.items()):
            if dim == 0:
                continue
            # The cast's typmod must be a literal; `dim` is an int from len().
            expr = f"m.embedding::vector({int(dim)})"
            cur = await conn.execute(
                f"""SELECT c.pos, n.* FROM unnest(%(pos)s::int[], %(t)s::text[], %(u)s::text[], %(type)s::text[],
                        %(vec)s::text[]) AS c(pos, t, u, type, vec)
                    CROSS JOIN LATERAL (
                        SELECT {_RECORD_COLUMNS}, m.embedding,
                               1 - ({expr} <=> c.vec::vector({int(dim)})) AS similarity
                        FROM memories m
                        WHERE m.tenant_id = c.t AND m.user_id = c.u AND m.type = c.type AND m.status = 'active'
                          AND m.type IN {MERGE_TYPES_SQL} AND vector_dims(m.embedding) = {int(dim)}
                        ORDER BY {expr} <=> c.vec::vector({int(dim)}) LIMIT %(limit)s
                    ) n""",
                {
                    "pos": positions,
                    "t": [probes[i].tenant_id for i in positions],
                    "u": [probes[i].user_id for i in positions],
                    "type": [probes[i].type_.value for i in positions],
                    "vec": [_vector_literal(probes[i].vector) for i in positions],
                    "limit": limit,
                },
            )
            for row in await cur.fetchall():
                found.setdefault(row["pos"], []).append(
                    Nearby(record_from_row(row), float(row["similarity"]), _floats(row["embedding"]))
                )
        return found

    async def centroids(
        self, conn: Conn, scopes: Sequence[tuple[str, str, MemoryType]], dim: int
    ) -> dict[tuple[str, str, MemoryType], tuple[np.ndarray, int]]:
        """Sum and count of the active embeddings of `dim` dimensions per (tenant, user, type), kept by a trigger."""
        if not scopes:
            return {}
        cur = await conn.execute(
            """SELECT c.tenant_id, c.user_id, c.type, c.total, c.n
               FROM memory_centroids c JOIN unnest(%s::text[], %s::text[], %s::text[]) AS s(t, u, type)
                 ON c.tenant_id = s.t AND c.user_id = s.u AND c.type = s.type
               WHERE c.dims = %s""",
            ([s[0] for s in scopes], [s[1] for s in scopes], [s[2].value for s in scopes], dim),
        )
        return {
            (r["tenant_id"], r["user_id"], MemoryType(r["type"])): (
                np.asarray(_floats(r["total"]), dtype=np.float64),
                int(r["n"]),
            )
            for r in await cur.fetchall()
        }

    async def with_vector(
        self, conn: Conn, tenant_id: str, user_id: str, memory_id: str
    ) -> tuple[MemoryRecord, list[float] | None] | None:
        """One record of this tenant and user, with its stored embedding."""
        cur = await conn.execute(
            f"SELECT {_RECORD_COLUMNS}, embedding FROM memories WHERE tenant_id = %s AND user_id = %s AND id = %s",
            (tenant_id, user_id, memory_id),
        )
        row = await cur.fetchone()
        if row is None:
            return None
        embedding = row["embedding"]
        return record_from_row(row), None if embedding is None else _floats(embedding)

    async def fact_versions(
        self, conn: Conn, tenant_id: str, user_id: str, category: str, key_name: str
    ) -> list[MemoryRecord]:
        """A keyed fact's versions in its timeline: the active row of the key and its superseded ones."""
        cur = await conn.execute(
            f"""SELECT {_RECORD_COLUMNS} FROM memories
                WHERE tenant_id = %s AND user_id = %s AND type = 'fact' AND category = %s AND key_name = %s
                  AND status IN ('active', 'superseded')""",
            (tenant_id, user_id, category, key_name),
        )
        return [record_from_row(r) for r in await cur.fetchall()]

    async def active_preferences(self, conn: Conn, tenant_id: str, user_id: str) -> list[MemoryRecord]:
        """The user's active preferences: what a retraction may take back (a few dozen rows at most)."""
        cur = await conn.execute(
            f"""SELECT {_RECORD_COLUMNS} FROM memories
                WHERE tenant_id = %s AND user_id = %s AND type = 'preference' AND status = 'active'""",
            (tenant_id, user_id),
        )
        return [record_from_row(r) for r in await cur.fetchall()]

    async def superseded_by(self, conn: Conn, tenant_id: str, user_id: str, memory_id: str) -> list[MemoryRecord]:
        cur = await conn.execute(
            f"SELECT {_RECORD_COLUMNS} FROM memories WHERE tenant_id = %s AND user_id = %s AND superseded_by = %s",
            (tenant_id, user_id, memory_id),
        )
        return [record_from_row(r) for r in await cur.fetchall()]

    async def upsert(
        self,
        conn: Conn,
        record: MemoryRecord,
        vector: Sequence[float] | None,
        context_vector: Sequence[float] | None = None,
    ) -> None:
        """Insert or update; a None vector (or context vector) keeps the stored one.

        A record's context is fixed when it is first written (migration 010), so
        an update never changes it; its observation only moves earlier (a late
        restatement of what was said before, agents/consolidator/decide.py).

        Safe on its own whatever the caller read: a write never lowers the
        stored version (an equal version passes only as the very same write,
        same `updated_at`: a replayed change, a redelivered import), and never
        turns a pruned or deleted row into anything else (a value stated again
        is a new version under a new id, never a revival). Such a stale write
        changes nothing and raises StoreRejected, like a row of another tenant
        or user; callers hold the user's lock (services/stores/postgres/locks.py),
        so it only ever catches a bug.
        """
        embedding = None if vector is None else np.asarray(vector, dtype=np.float32)
        context_embedding = None if context_vector is None else np.asarray(context_vector, dtype=np.float32)
        cur = await conn.execute(
            f"""INSERT INTO memories ({_RECORD_COLUMNS}, source_session_id, embedding, context_embedding)
                VALUES ({", ".join(["%s"] * 29)})
                ON CONFLICT (id) DO UPDATE SET text = EXCLUDED.text, importance = EXCLUDED.importance,
                  observed_at = LEAST(memories.observed_at, EXCLUDED.observed_at),
                  confidence = EXCLUDED.confidence, status = EXCLUDED.status, updated_at = EXCLUDED.updated_at,
                  superseded_at = EXCLUDED.superseded_at, superseded_by = EXCLUDED.superseded_by,
                  provenance = EXCLUDED.provenance, entities = EXCLUDED.entities,
                  -- access marks commit on their own: a write from an older read never takes them back
                  access_count = GREATEST(memories.access_count, EXCLUDED.access_count),
                  reinforcement_count = EXCLUDED.reinforcement_count,
                  version = EXCLUDED.version,
                  last_accessed_at = GREATEST(memories.last_accessed_at, EXCLUDED.last_accessed_at),
                  compressed = EXCLUDED.compressed, question = EXCLUDED.question,
                  embedding = COALESCE(EXCLUDED.embedding, memories.embedding),
                  context_embedding = COALESCE(EXCLUDED.context_embedding, memories.context_embedding)
                WHERE memories.tenant_id = EXCLUDED.tenant_id AND memories.user_id = EXCLUDED.user_id
                  AND (memories.version < EXCLUDED.version
                       OR (memories.version = EXCLUDED.version AND memories.updated_at = EXCLUDED.updated_at))
                  AND (memories.status NOT IN ('pruned', 'deleted') OR memories.status = EXCLUDED.status)
                RETURNING 1 AS written""",
            (
                record.id,
                record.tenant_id,
                record.user_id,
                record.type.value,
                record.text,
                record.content_hash,
                record.category,
                record.key_name,
                record.value,
                record.importance,
                record.confidence,
                record.status.value,
                record.observed_at,
                record.created_at,
                record.updated_at,
                record.superseded_at,
                record.superseded_by,
                Jsonb(record.source.model_dump(mode="json")),
                record.entities,
                record.access_count,
                record.reinforcement_count,
                record.version,
                record.last_accessed_at,
                record.compressed,
                None if record.question is None else Jsonb(record.question.model_dump(mode="json")),
                record.context,
                record.source.session_id,
                embedding,
                context_embedding,
            ),
        )
        if await cur.fetchone() is None:
            raise StoreRejected(await self._refused(conn, record))

    @staticmethod
    async def _refused(conn: Conn, record: MemoryRecord) -> str:
        """Why an upsert wrote nothing: the id is another tenant's or user's, or the write is stale."""
        cur = await conn.execute("SELECT tenant_id, user_id, status, version FROM memories WHERE id = %s", (record.id,))
        row = await cur.fetchone()
        if row is None or (row["tenant_id"], row["user_id"]) != (record.tenant_id, record.user_id):
            # Never touch (or describe) their row.
            return f"memory {record.id} belongs to another tenant or user"
        return (
            f"stale write of memory {record.id}: v{record.version} {record.status.value} over the stored "
            f"v{row['version']} {row['status']}"
        )
