"""`memstream changes`: `memory.changes` as a subscriber reads it, opened, one JSON change per line.

The topic carries record changes sealed per user (services/archive/changes.py),
so a plain Kafka consumer sees envelopes; this command opens them with the
master key and the `user_keys` table (it needs Postgres and the broker: run
it with the stack up, with the same MEMSTREAM_MASTER_KEY or data dir) and
prints each MemoryChange, or UserForgotten, as the JSON of
`schemas/json/memory_change.schema.json` / `user_forgotten.schema.json`.
A forgotten user's changes cannot be opened and are skipped; stderr says how
many, by reason.

- default: from the log's end, following (new changes as they come);
- `--from-beginning`: the whole log, then stop at its end;
- `--from-beginning --follow`: the whole log, then keep following;
- `--tenant` / `--user`: only that scope (picked by the Kafka key before
  opening, so other users' keys are never looked up).

In a generation (MEMSTREAM_GENERATION) it reads that generation's changes topic.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections import Counter
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping, Sequence
from typing import Any, BinaryIO, TypeVar

from services.core.config import Settings
from services.kafka.log_end import Message

T = TypeVar("T")


def wanted(key: bytes | None, tenant: str | None, user: str | None) -> bool:
    """Whether a message keyed `tenant:user` is in scope (ids never hold ':', so the split is exact)."""
    if tenant is None and user is None:
        return True
    if key is None:
        return False
    held_tenant, _, held_user = key.decode(errors="replace").partition(":")
    return tenant in (None, held_tenant) and user in (None, held_user)


async def print_changes(
    settings: Settings,
    batches: AsyncIterator[Sequence[Message]],
    out: BinaryIO,
    *,
    tenant: str | None = None,
    user: str | None = None,
) -> tuple[int, Counter[str]]:
    """Open every batch in scope and write one JSON line per change; (printed, skipped by reason)."""
    from schemas import codec
    from services.archive.changes import open_changes
    from services.archive.keys import KeyStore
    from services.stores.postgres import PgPool

    pool = PgPool(settings.pg_dsn, 2, connect_timeout=settings.pg_connect_timeout, pool_timeout=30.0)
    keys = KeyStore.from_settings(pool, settings)  # a reader: never creates a master key
    printed = 0
    skipped: Counter[str] = Counter()
    await pool.open()
    try:
        async for batch in batches:
            values = [m.value for m in batch if wanted(m.key, tenant, user)]
            opened, missed = await open_changes(keys, values)
            skipped.update(missed)
            for change in opened:
                if tenant in (None, change.tenant_id) and user in (None, change.user_id):
                    out.write(codec.dumps(change) + b"\n")
                    printed += 1
            out.flush()
    finally:
        await pool.close()
    return printed, skipped


def _batches(settings: Settings, args: argparse.Namespace) -> AsyncIterator[Sequence[Message]]:
    from services.core.generations import of
    from services.kafka.log_end import read_to_end
    from services.kafka.log_tail import follow_topic

    topic = of(settings).topic("changes")
    if args.from_beginning and not args.follow:
        return read_to_end(settings, topic, settle=args.settle, idle=args.idle)
    return follow_topic(settings, topic, from_beginning=args.from_beginning)


def run_printer(
    name: str,
    main: Callable[[], Coroutine[Any, Any, T]],
    summary: Callable[[T], str],
    errors: tuple[type[Exception], ...],
) -> int:
    """Run `main`, which prints a topic; Ctrl-C stops it normally, one of `errors` is a line, not a traceback.

    `main` is called inside: building it may raise one of `errors` too (an unknown generation).
    """
    try:
        result = asyncio.run(main())
    except KeyboardInterrupt:
        return 0
    except errors as exc:
        print(f"{name}: {exc}", file=sys.stderr)
        return 1
    print(summary(result), file=sys.stderr)
    return 0


def tally(counts: Mapping[str, int]) -> str:
    """`reason=n, ...` in name order, or `none`."""
    return ", ".join(f"{what}={n}" for what, n in sorted(counts.items())) or "none"


def _cmd_changes(settings: Settings, args: argparse.Namespace) -> int:
    from services.core.errors import ConfigError

    return run_printer(
        "changes",
        lambda: print_changes(
            settings, _batches(settings, args), sys.stdout.buffer, tenant=args.tenant, user=args.user
        ),
        lambda result: f"{result[0]} changes printed; skipped: {tally(result[1])}",
        (ConfigError, LookupError),
    )


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    changes = sub.add_parser(
        "changes", help="print memory.changes opened, one JSON change per line (forgotten users' changes skipped)"
    )
    changes.add_argument("--from-beginning", action="store_true", help="from the log's start (default: its end)")
    changes.add_argument(
        "--follow", action="store_true", help="keep following new changes (implied without --from-beginning)"
    )
    changes.add_argument("--tenant", help="only this tenant")
    changes.add_argument("--user", help="only this user")
    changes.add_argument(
        "--settle",
        type=float,
        default=1.0,
        help="with --from-beginning alone: quiet seconds at the end before stopping",
    )
    changes.add_argument(
        "--idle", type=float, default=10.0, help="with --from-beginning alone: stop after this long with no message"
    )
    changes.set_defaults(func=_cmd_changes)
