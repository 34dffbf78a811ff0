"""The recall index from Postgres: every active memory with its stored embedding, as the sink indexes it.

A point is what the qdrant sink would write for the record's latest change
(services.stores.index_feed.indexed): the stored embedding as the dense vector,
the stored context embedding as the dense context vector (exchanges), BM25
recomputed from the text and the context with the same encoder (the
settings' k1, b and average lengths), and the sink's own payload. It is also
how an index made before the context vectors existed is brought up to date
(the service refuses to open one: services.stores.vector.OUTDATED_INDEX).
Rows are read in id order, a page at a time, across every tenant and user:
this operator scan is the one memory query not scoped to one user.

Where the new index goes depends on the engine:
- Qdrant Edge (embedded): a shard directory has one owner, the process that
  runs the read service and the index sink. The rebuild therefore runs only
  while that process does not (services/rebuild/embedded.py checks), builds
  into `<shard>.rebuild` next to the live directory and renames it into
  place when complete, so an interrupted rebuild leaves the old shard as it
  was. Nothing changes meanwhile: the stack is stopped.
- Qdrant server: live. The points go into a new collection, then the
  service's collection name becomes an alias of it in one atomic alias
  update (the first time, the old collection is deleted just before the
  alias is created: a gap of one request). Changes the sink applied to the
  old collection during the build are carried over by a catch-up of every
  row updated since the build began, and a reconciliation removes points
  whose memory is no longer active (a user forgotten meanwhile).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from schemas import MemoryRecord
from services.core.config import Settings
from services.rebuild.progress import Progress
from services.stores import model_suffix
from services.stores.index_feed import indexed
from services.stores.postgres import PgPool
from services.stores.postgres.records import RECORD_COLUMNS, record_from_row, vector_floats
from services.stores.vector import Bm25Encoder, VectorIndex

if TYPE_CHECKING:
    from qdrant_client import AsyncQdrantClient

log = logging.getLogger("memstream.rebuild")

PAGE = 1000
# A bulk-built Edge shard is optimized and reopened after this many points: the optimizer's peak and the
# writes' mapped pages are one stretch's (optimizing a million memories at once mapped 13.8 GiB).
REOPEN_EVERY = 100_000
# The packaged MiniLM's dimension (Runtime.start assumes it too when it does not load the model).
MINILM_DIMENSION = 384
# Rows updated this long before a live build began are caught up as well (clock skew between hosts).
CATCH_UP_MARGIN = timedelta(seconds=5)


def model_dimension(settings: Settings) -> int:
    return settings.embed_dimension if settings.embed_base_url else MINILM_DIMENSION


def edge_path(settings: Settings) -> Path:
    """The shard directory the service opens (services.stores.open_vector_index: one per embedding model)."""
    suffix = model_suffix(settings)
    return settings.qdrant_path / suffix.lstrip("_") if suffix else settings.qdrant_path


@dataclass
class IndexTally:
    memories: int = 0  # points written
    skipped: int = 0  # active rows without an embedding of the model's dimension: no point, as the sink
    caught_up: int = 0  # live builds: rows re-applied after the build
    removed: int = 0  # live builds: points whose memory is no longer active

    def as_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


_INDEXABLE = "status = 'active' AND embedding IS NOT NULL AND vector_dims(embedding) = %(dim)s"


async def count_indexable(pool: PgPool, dim: int) -> tuple[int, int]:
    """(active rows that become points, active rows that cannot: no embedding, or another model's)."""
    async with pool.connection("rebuild_count") as conn:
        cur = await conn.execute(
            f"""SELECT count(*) FILTER (WHERE {_INDEXABLE}) AS ok,
                       count(*) FILTER (WHERE NOT ({_INDEXABLE})) AS other
                FROM memories WHERE status = 'active'""",
            {"dim": dim},
        )
        row = await cur.fetchone()
    return (int(row["ok"]), int(row["other"])) if row else (0, 0)


Row = tuple[MemoryRecord, list[float], list[float] | None]


async def indexable_rows(
    pool: PgPool, dim: int, *, since: datetime | None = None, page: int = PAGE
) -> AsyncGenerator[list[Row], None]:
    """Pages of active rows with an embedding of `dim` dimensions, in id order (updated at or after `since`),
    each with its context embedding (None: none, or not of `dim` dimensions)."""
    after = ""
    while True:
        async with pool.connection("rebuild_scan") as conn:
            cur = await conn.execute(
                f"""SELECT {RECORD_COLUMNS}, embedding,
                           CASE WHEN vector_dims(context_embedding) = %(dim)s THEN context_embedding END AS ctx
                    FROM memories
                    WHERE {_INDEXABLE} AND id > %(after)s AND (%(since)s::timestamptz IS NULL OR updated_at >= %(since)s)
                    ORDER BY id LIMIT %(page)s""",
                {"dim": dim, "after": after, "since": since, "page": page},
            )
            rows = await cur.fetchall()
        if not rows:
            return
        yield [(record_from_row(r), vector_floats(r["embedding"]) or [], vector_floats(r["ctx"])) for r in rows]
        after = rows[-1]["id"]


async def fill(
    index: VectorIndex,
    pool: PgPool,
    dim: int,
    progress: Progress | None,
    *,
    since: datetime | None = None,
    bm25: Bm25Encoder | None = None,
    after_page: Callable[[int], Awaitable[None]] | None = None,
    page: int = PAGE,
) -> int:
    """Write every indexable row (updated since `since`) into `index`; points written.

    `bm25`: the service's encoder (Bm25Encoder.from_settings); None: the default parameters.
    `after_page`: awaited with the points written so far after each page is in the index.
    """
    bm25 = bm25 or Bm25Encoder()
    written = 0
    pages = indexable_rows(pool, dim, since=since, page=page)
    # The next page is read from Postgres while this one is encoded and written to the index.
    ahead = asyncio.ensure_future(anext(pages, None))
    try:
        while (rows := await ahead) is not None:
            ahead = asyncio.ensure_future(anext(pages, None))
            await index.upsert([indexed(record, vector, context, bm25) for record, vector, context in rows])
            written += len(rows)
            if progress is not None:
                progress.advance(len(rows))
            if after_page is not None:
                await after_page(written)
    finally:
        if not ahead.done():
            ahead.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await ahead
        await pages.aclose()
    return written


async def rebuild_edge(settings: Settings, pool: PgPool, progress: Progress) -> IndexTally:
    """Build a complete shard beside the live one, then rename it into place (the stack must be stopped)."""
    dim = model_dimension(settings)
    live = edge_path(settings)
    staging = live.with_name(live.name + ".rebuild")
    shutil.rmtree(staging, ignore_errors=True)
    total, other = await count_indexable(pool, dim)
    progress.total = total
    written = await build_edge_shard(staging, pool, dim, progress, Bm25Encoder.from_settings(settings))
    swap_in(staging, live)
    return IndexTally(memories=written, skipped=other)


async def build_edge_shard(
    path: Path,
    pool: PgPool,
    dim: int,
    progress: Progress | None,
    bm25: Bm25Encoder,
    *,
    reopen_every: int = REOPEN_EVERY,
    page: int = PAGE,
) -> int:
    """A new shard at `path` with every indexable row; points written.

    Written cold, and every `reopen_every` points optimized (that stretch
    becomes a segment of its own) and reopened, so the build holds one
    stretch's pages at a time. The segments stay cold: the service maps a
    user's points on that user's first recall, so its memory follows the
    users who recall, not every memory (services/stores/qdrant_edge_index.py).
    """
    from services.stores.qdrant_edge_index import EdgeIndex

    index = EdgeIndex(path, cold=True)
    await index.ensure(dim)
    sealed = 0

    async def optimize(written: int) -> None:
        # A minute or more per stretch, during which the progress line stands still.
        log.info("index: indexing memories %d-%d into a segment", sealed + 1, written)
        await index.optimize()

    async def seal(written: int) -> None:
        nonlocal sealed
        if written - sealed >= reopen_every:
            await optimize(written)
            await index.reopen()
            sealed = written

    try:
        written = await fill(index, pool, dim, progress, bm25=bm25, after_page=seal, page=page)
        if written > sealed:
            await optimize(written)
        return written
    finally:
        await index.close()


def swap_in(staging: Path, live: Path) -> None:
    """Replace `live` by `staging`: the old one is moved aside first and removed last."""
    old = live.with_name(f"{live.name}.old-{int(time.time())}")
    if live.exists():
        live.rename(old)
    staging.rename(live)
    shutil.rmtree(old, ignore_errors=True)


async def rebuild_server(
    settings: Settings, pool: PgPool, progress: Progress, client: AsyncQdrantClient | None = None
) -> IndexTally:
    """A new collection, filled, then made the service's collection by alias, caught up and reconciled.

    `client`: the one the service's index uses, for qdrant-client's in-memory engine (tests), whose
    collections only that client sees; against a server any client reaches the same collections.
    """
    from qdrant_client import models

    from services.stores.qdrant_server_index import ServerIndex

    if settings.qdrant_url is None:
        raise ValueError("rebuild_server needs MEMSTREAM_QDRANT_URL")
    dim = model_dimension(settings)
    name = settings.qdrant_collection + model_suffix(settings)
    fresh = f"{name}-r{datetime.now(UTC):%Y%m%d%H%M%S}"
    began = datetime.now(UTC)
    total, other = await count_indexable(pool, dim)
    progress.total = total
    target = ServerIndex(settings.qdrant_url, fresh, settings.qdrant_api_key)
    owned = client is None
    if client is None:
        client = target._client
    else:
        target._client = client
    await target.ensure(dim)
    tally = IndexTally(skipped=other)
    bm25 = Bm25Encoder.from_settings(settings)
    try:
        tally.memories = await fill(target, pool, dim, progress, bm25=bm25)
        tally.caught_up = await fill(target, pool, dim, None, since=began - CATCH_UP_MARGIN, bm25=bm25)
        previous = await _switch_alias(client, name, fresh, models)
        # Whatever the sink wrote to the old collection between the catch-up and the switch.
        tally.caught_up += await fill(target, pool, dim, None, since=began - CATCH_UP_MARGIN, bm25=bm25)
        tally.removed = await reconcile(target, client, fresh, pool)
        if previous is not None:
            await client.delete_collection(previous)
    finally:
        if owned:
            await target.close()
    return tally


async def _switch_alias(client: AsyncQdrantClient, name: str, fresh: str, models: Any) -> str | None:
    """Point alias `name` at `fresh` in one update; the collection it named before (to delete), if any."""
    aliases = {a.alias_name: a.collection_name for a in (await client.get_aliases()).aliases}
    previous = aliases.get(name)
    create = models.CreateAliasOperation(create_alias=models.CreateAlias(collection_name=fresh, alias_name=name))
    if previous is not None:
        delete = models.DeleteAliasOperation(delete_alias=models.DeleteAlias(alias_name=name))
        await client.update_collection_aliases(change_aliases_operations=[delete, create])
        return previous
    if await client.collection_exists(name):
        # A plain collection of that name (before the first rebuild): it must go for the alias to exist.
        await client.delete_collection(name)
    await client.update_collection_aliases(change_aliases_operations=[create])
    return None


async def reconcile(index: VectorIndex, client: AsyncQdrantClient, collection: str, pool: PgPool) -> int:
    """Delete points whose memory is not active in Postgres any more; how many."""
    removed = 0
    offset: Any = None
    while True:
        points, offset = await client.scroll(
            collection, limit=PAGE, offset=offset, with_payload=["tenant_id", "user_id"]
        )
        stale = await _not_active(pool, [(str(p.id), dict(p.payload or {})) for p in points])
        await index.delete(stale)
        removed += len(stale)
        if offset is None:
            return removed


async def _not_active(pool: PgPool, points: Sequence[tuple[str, dict[str, Any]]]) -> list[str]:
    if not points:
        return []
    async with pool.connection("rebuild_reconcile") as conn:
        cur = await conn.execute(
            """SELECT k.id FROM unnest(%s::text[], %s::text[], %s::text[]) AS k(id, t, u)
               WHERE NOT EXISTS (SELECT 1 FROM memories m WHERE m.tenant_id = k.t AND m.user_id = k.u
                                 AND m.id = k.id AND m.status = 'active')""",
            (
                [pid for pid, _ in points],
                [str(p.get("tenant_id", "")) for _, p in points],
                [str(p.get("user_id", "")) for _, p in points],
            ),
        )
        return [r["id"] for r in await cur.fetchall()]
