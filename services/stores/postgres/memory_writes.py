"""The consolidator's side of long-term memory: lookups and upserts inside its batch transaction."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from psycopg.types.json import Jsonb

from schemas import MemoryRecord, MemoryType
from services.errors import StoreRejected
from services.stores.postgres.pool import Conn
from services.stores.postgres.records import RECORD_COLUMNS as _RECORD_COLUMNS
from services.stores.postgres.records import record_from_row


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

    async def superseded_by(self, conn: Conn, tenant_id: str, user_id: str, memory_id: str) -> list[MemoryRecord]:
        cur = await conn.execute(
            f"SELECT {_RECORD_COLUMNS} FROM memories WHERE tenant_id = %s AND user_id = %s AND superseded_by = %s",
            (tenant_id, user_id, memory_id),
        )
        return [record_from_row(r) for r in await cur.fetchall()]

    async def upsert(self, conn: Conn, record: MemoryRecord, vector: Sequence[float] | None) -> None:
        embedding = None if vector is None else np.asarray(vector, dtype=np.float32)
        cur = await conn.execute(
            f"""INSERT INTO memories ({_RECORD_COLUMNS}, source_session_id, embedding)
                VALUES ({", ".join(["%s"] * 27)})
                ON CONFLICT (id) DO UPDATE SET text = EXCLUDED.text, importance = EXCLUDED.importance,
                  confidence = EXCLUDED.confidence, status = EXCLUDED.status, updated_at = EXCLUDED.updated_at,
                  superseded_at = EXCLUDED.superseded_at, superseded_by = EXCLUDED.superseded_by,
                  provenance = EXCLUDED.provenance, entities = EXCLUDED.entities,
                  access_count = EXCLUDED.access_count, reinforcement_count = EXCLUDED.reinforcement_count,
                  version = EXCLUDED.version, last_accessed_at = EXCLUDED.last_accessed_at,
                  compressed = EXCLUDED.compressed, question = EXCLUDED.question,
                  embedding = COALESCE(EXCLUDED.embedding, memories.embedding)
                WHERE memories.tenant_id = EXCLUDED.tenant_id AND memories.user_id = EXCLUDED.user_id
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
                record.source.session_id,
                embedding,
            ),
        )
        if await cur.fetchone() is None:
            # The id exists under another tenant or user: never touch their row.
            raise StoreRejected(f"memory {record.id} belongs to another tenant or user")
