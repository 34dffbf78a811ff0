"""Rebuild rates on the bench's stack: the index from Postgres, the store from `memory.changes`.

Both run beside the live stack without touching it: the index is built into
a scratch Qdrant Edge shard (the live one belongs to the app process), and
the store is replayed into a scratch database on the same Postgres server,
migrated by the rebuild itself, then dropped. After the seed stage that is
the bench's 100k memories and every change that made them.
"""

from __future__ import annotations

import io
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg

from services.core.config import Settings
from services.rebuild.index import build_edge_shard, count_indexable, model_dimension
from services.rebuild.progress import Progress
from services.rebuild.store import rebuild_store
from services.stores.postgres import PgPool
from services.stores.vector import Bm25Encoder

SCRATCH_DB = "bench_rebuild"


async def index(settings: Settings, out: dict[str, Any]) -> None:
    dim = model_dimension(settings)
    pool = PgPool(settings.pg_dsn, 2, pool_timeout=30.0)
    await pool.open()
    try:
        out["memories"], out["not_indexable"] = await count_indexable(pool, dim)
        with tempfile.TemporaryDirectory() as tmp:
            started = time.perf_counter()
            # As `memstream rebuild index` builds it.
            written = await build_edge_shard(
                Path(tmp) / "shard", pool, dim, Progress("index", stream=io.StringIO()), Bm25Encoder()
            )
            out["seconds"] = time.perf_counter() - started
    finally:
        await pool.close()
    out["memories_per_s"] = written / out["seconds"]


def _admin(settings: Settings) -> str:
    return psycopg.conninfo.make_conninfo(settings.pg_dsn, dbname="postgres")


async def store(settings: Settings, out: dict[str, Any]) -> None:
    with psycopg.connect(_admin(settings), autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {SCRATCH_DB}")
        conn.execute(f"CREATE DATABASE {SCRATCH_DB}")
    scratch = settings.model_copy(update={"pg_dsn": psycopg.conninfo.make_conninfo(settings.pg_dsn, dbname=SCRATCH_DB)})
    try:
        started = time.perf_counter()
        # The changes are sealed per user: the scratch database gets the live one's data keys first.
        tally, ended = await rebuild_store(scratch, Progress("store", stream=io.StringIO()), keys_from=settings.pg_dsn)
        out["seconds"] = time.perf_counter() - started
        out.update(tally.as_dict())
        out["end"] = ended
        out["changes_per_s"] = tally.messages / out["seconds"]
    finally:
        with psycopg.connect(_admin(settings), autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {SCRATCH_DB}")
