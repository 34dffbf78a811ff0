"""`memstream rebuild index|store|generation`: re-create derived state from its source, with progress.

- `rebuild index`: the recall index from Postgres (after losing the index,
  or a change of the index format). With the embedded Qdrant Edge shard the
  stack must be stopped (its app owns the shard); the command then starts
  the embedded Postgres by itself. With a Qdrant server it runs live.
- `rebuild store --from changes`: Postgres memory from `memory.changes`
  (after losing the database). Needs the broker and Postgres: run it with
  the stack up.
- `rebuild generation NAME --from archive`: all memory derived again from
  `memory.archive` into a new generation, while the current one serves
  (services/rebuild/generation.py); `generation list|switch|drop` manage them.

Progress is a bar with rate and ETA on a terminal, log lines otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from services.core.config import Settings
from services.core.errors import StackError
from services.stores.postgres import generations as registry

T = TypeVar("T")


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
                # With read replicas each keeps its own shard (services/api/replica.py): every one is rebuilt.
                shards = [reachable.model_copy(update={"replica": n}) for n in range(1, settings.read_replicas + 1)]
                for shard in shards or [reachable]:
                    tally = asyncio.run(run(shard))
    except StackError as exc:
        print(f"rebuild index: {exc}", file=sys.stderr)
        return 1
    progress.finish()
    _report("index rebuilt", "memories", tally["memories"], started, tally)
    return 0


def _cmd_store(settings: Settings, args: argparse.Namespace) -> int:
    from services.core.generations import of
    from services.rebuild.progress import Progress
    from services.rebuild.store import rebuild_store

    progress = Progress("store", unit="changes")
    started = time.perf_counter()
    # In a generation (MEMSTREAM_GENERATION) its own changes topic, into its own schema.
    topic = of(settings).topic("changes")
    try:
        tally, ended = asyncio.run(
            rebuild_store(settings, progress, topic=topic, settle=args.settle, idle=args.idle, keys_from=args.keys_from)
        )
    except StackError as exc:  # no users' data keys to open the changes with
        print(f"rebuild store: {exc}", file=sys.stderr)
        return 1
    progress.finish()
    _report(f"store rebuilt from {topic}", "changes", tally.messages, started, {**tally.as_dict(), "end": ended})
    return 0 if tally.rejected == 0 and tally.undecodable == 0 else 2


def _cmd_generation_rebuild(settings: Settings, args: argparse.Namespace) -> int:
    from services.core.generations import GenerationError
    from services.rebuild.generation import rebuild_generation
    from services.rebuild.progress import Progress

    if settings.generation:
        print("rebuild generation: run it from the default generation (unset MEMSTREAM_GENERATION)", file=sys.stderr)
        return 1
    progress = Progress(f"archive → {args.name}", unit="records")
    started = time.perf_counter()
    try:
        tally = asyncio.run(rebuild_generation(settings, args.name, progress, settle=args.settle, within=args.timeout))
    except GenerationError as exc:
        print(f"rebuild generation: {exc}", file=sys.stderr)
        return 1
    _report(f"generation {args.name} ready", "turns", tally.events, started, tally.as_dict())
    print(f"serve it with: memstream generation switch {args.name}")
    return 0


def _registry(settings: Settings, work: Callable[[Any], Awaitable[T]]) -> T:
    """Run `work` on one autocommit connection to the registry's database (the default generation's)."""
    from psycopg import AsyncConnection
    from psycopg.rows import dict_row

    async def run() -> T:
        async with await AsyncConnection.connect(settings.pg_dsn, autocommit=True, row_factory=dict_row) as conn:
            return await work(conn)

    return asyncio.run(run())


def _cmd_generation_list(settings: Settings, args: argparse.Namespace) -> int:

    rows = _registry(settings, registry.listing)
    if args.json:
        print(json.dumps([{**r.__dict__, "schema": r.schema} for r in rows], default=str, indent=2))
        return 0
    print(f"{'name':<20} {'state':<9} {'schema':<22} {'switched':<20} detail")
    for r in rows:
        switched = r.switched_at.isoformat(timespec="seconds") if r.switched_at else "-"
        detail = ", ".join(
            f"{k}={v}" for k, v in sorted(r.detail.items()) if k in ("archived", "events", "active", "lag", "error")
        )
        print(f"{r.name:<20} {r.state:<9} {r.schema:<22} {switched:<20} {detail or '-'}")
    return 0


def _cmd_generation_switch(settings: Settings, args: argparse.Namespace) -> int:
    from services.core import generations

    try:
        before = _registry(settings, lambda conn: registry.switch(conn, args.name))
    except generations.GenerationError as exc:
        print(f"generation switch: {exc}", file=sys.stderr)
        return 1
    print(
        f"generation {args.name} serves (was {before}); the read service follows within "
        f"{settings.generation_refresh_seconds:g}s (/readyz shows which one it serves)"
    )
    return 0


def _cmd_generation_drop(settings: Settings, args: argparse.Namespace) -> int:
    from services.core import generations
    from services.rebuild.generation import drop_generation

    try:
        removed = asyncio.run(drop_generation(settings, args.name))
    except generations.GenerationError as exc:
        print(f"generation drop: {exc}", file=sys.stderr)
        return 1
    print(f"generation {args.name} dropped: {', '.join(removed) or 'nothing held'}")
    return 0


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
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
    store.add_argument(
        "--keys-from",
        metavar="DSN",
        help="copy the users' data keys (user_keys) from this database first: a backup, after losing the database",
    )
    store.set_defaults(func=_cmd_store)
    gen = kinds.add_parser(
        "generation", help="derive all memory again from memory.archive into a new generation, beside the serving one"
    )
    gen.add_argument("name", help="the new generation's name: lowercase letters, digits, _")
    gen.add_argument("--from", dest="source", choices=["archive"], required=True, help="the log to replay")
    gen.add_argument(
        "--settle", type=float, default=5.0, help="seconds every stage must stay caught up before it is done"
    )
    gen.add_argument("--timeout", type=float, default=3600.0, help="give up after this many seconds")
    gen.set_defaults(func=_cmd_generation_rebuild)

    generation = sub.add_parser("generation", help="list, switch or drop generations of memory")
    ops = generation.add_subparsers(dest="generation_command", required=True)
    listed = ops.add_parser("list", help="every generation, its state and figures")
    listed.add_argument("--json", action="store_true")
    listed.set_defaults(func=_cmd_generation_list)
    switch = ops.add_parser("switch", help="make a ready generation (or `default`) the one the read service serves")
    switch.add_argument("name")
    switch.set_defaults(func=_cmd_generation_switch)
    dropped = ops.add_parser("drop", help="delete a generation that does not serve: schema, topics, index")
    dropped.add_argument("name")
    dropped.set_defaults(func=_cmd_generation_drop)
