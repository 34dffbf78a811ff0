"""`memstream rebuild index|store|generation`: re-create derived state from its source, with progress.

- `rebuild index`: the recall index from Postgres (after losing the index,
  or a change of the index format). With the embedded Qdrant Edge shard the
  stack must be stopped (its app owns the shard); the command then starts
  the embedded Postgres by itself. With a Qdrant server it runs live.
- `rebuild store --from changes`: Postgres memory from `memory.changes`
  (after losing the database). Needs the broker and Postgres: run it with
  the stack up.

Progress is a bar with rate and ETA on a terminal, log lines otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from typing import Any

from services.config import Settings
from services.errors import StackError


def _report(what: str, unit: str, count: int, started: float, details: dict[str, Any]) -> None:
    seconds = time.perf_counter() - started
    rate = count / seconds if seconds > 0 else 0.0
    extra = ", ".join(f"{k}={v}" for k, v in details.items())
    print(f"{what}: {count} {unit} in {seconds:.1f}s ({rate:,.0f} {unit}/s); {extra}")


def _cmd_index(settings: Settings, _: argparse.Namespace) -> int:
    from services.rebuild.embedded import postgres_for_rebuild, require_stack_stopped
    from services.rebuild.index import rebuild_edge, rebuild_server
    from services.rebuild.progress import Progress
    from services.stores.postgres import PgPool

    async def run(s: Settings) -> dict[str, int]:
        pool = PgPool(s.pg_dsn, 2, connect_timeout=s.pg_connect_timeout, pool_timeout=30.0)
        await pool.open()
        try:
            build = rebuild_server if s.qdrant_url else rebuild_edge
            return (await build(s, pool, progress)).as_dict()
        finally:
            await pool.close()

    progress = Progress("index", unit="memories")
    started = time.perf_counter()
    try:
        if settings.qdrant_url:
            tally = asyncio.run(run(settings))
        else:
            require_stack_stopped(settings)
            with postgres_for_rebuild(settings) as reachable:
                tally = asyncio.run(run(reachable))
    except StackError as exc:
        print(f"rebuild index: {exc}", file=sys.stderr)
        return 1
    progress.finish()
    _report("index rebuilt", "memories", tally["memories"], started, tally)
    return 0


def _cmd_store(settings: Settings, args: argparse.Namespace) -> int:
    from services.rebuild.progress import Progress
    from services.rebuild.store import rebuild_store

    progress = Progress("store", unit="changes")
    started = time.perf_counter()
    tally, ended = asyncio.run(rebuild_store(settings, progress, settle=args.settle, idle=args.idle))
    progress.finish()
    _report("store rebuilt from memory.changes", "changes", tally.messages, started, {**tally.as_dict(), "end": ended})
    return 0 if tally.rejected == 0 and tally.undecodable == 0 else 2


def add_parser(sub: Any) -> None:
    rebuild = sub.add_parser("rebuild", help="re-create the index, the store or a generation from its source")
    kinds = rebuild.add_subparsers(dest="rebuild_command", required=True)
    kinds.add_parser(
        "index", help="the recall index from Postgres (embedded Qdrant Edge: stop the stack first)"
    ).set_defaults(func=_cmd_index)
    store = kinds.add_parser("store", help="Postgres memory from memory.changes (with the stack up)")
    store.add_argument("--from", dest="source", choices=["changes"], required=True, help="the log to replay")
    store.add_argument(
        "--settle", type=float, default=1.0, help="seconds without a message, at the log's end, before finishing"
    )
    store.add_argument(
        "--idle", type=float, default=10.0, help="seconds without any message after which the log counts as ended"
    )
    store.set_defaults(func=_cmd_store)
