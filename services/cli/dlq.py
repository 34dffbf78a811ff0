"""`memstream dlq`: `memory.dlq` as an operator reads it, one JSON entry per line, sealed entries opened.

An entry of an identifiable user is sealed with their data key
(services/archive/dlq.py); this command opens it with the master key and the
`user_keys` table (run it with the stack's environment), and says
`"state": "forgotten"` with no value when the user's key is gone. Entries
that name nobody are printed as they are (`"state": "clear"`).

It reads the topic from its beginning and stops once nothing has arrived
for `--idle` seconds (2 s). Values print as UTF-8 text (`value`), or base64
(`value_base64`) when they are not text.
"""

from __future__ import annotations

import argparse
import base64
import sys
import time
import uuid
from collections import Counter
from collections.abc import Mapping
from typing import Any, BinaryIO

import orjson

from services.archive import dlq as sealed
from services.cli.changes import run_printer, tally
from services.core.config import Settings


def entry_line(
    partition: int, offset: int, key: bytes | None, headers: Mapping[str, bytes], entry: sealed.Entry
) -> dict[str, Any]:
    """One entry as printed: where it is, its headers as text, and its value as far as it opens."""
    line: dict[str, Any] = {
        "partition": partition,
        "offset": offset,
        "key": None if key is None else key.decode("utf-8", "replace"),
        "headers": {k.removeprefix("x-memstream-"): v.decode("utf-8", "replace") for k, v in headers.items()},
        "state": entry.state,
    }
    if entry.value is not None:
        try:
            line["value"] = entry.value.decode("utf-8")
        except UnicodeDecodeError:
            line["value_base64"] = base64.b64encode(entry.value).decode()
    return line


async def print_dlq(settings: Settings, out: BinaryIO, *, idle: float = 2.0) -> Counter[str]:
    """Every entry from the topic's beginning, opened where it can be; how many, by state."""
    from aiokafka import AIOKafkaConsumer

    from services.archive.keys import KeyStore
    from services.core import topics
    from services.core.kafka_auth import aiokafka_kwargs
    from services.stores.postgres import PgPool

    pool = PgPool(settings.pg_dsn, 2, connect_timeout=settings.pg_connect_timeout, pool_timeout=30.0)
    keys = KeyStore.from_settings(pool, settings)  # a reader: never creates a master key
    consumer = AIOKafkaConsumer(
        topics.DLQ,
        bootstrap_servers=settings.kafka_bootstrap,
        group_id=f"memstream-dlq-reader-{uuid.uuid4().hex}",  # nothing committed: every run reads it all
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        **aiokafka_kwargs(settings),
    )
    states: Counter[str] = Counter()
    await pool.open()
    await consumer.start()
    try:
        last = time.monotonic()
        while time.monotonic() - last < idle:
            fetched = await consumer.getmany(timeout_ms=200)
            messages = [m for batch in fetched.values() for m in batch]
            if not messages:
                continue
            last = time.monotonic()
            found = [(m.value, {k: bytes(v) for k, v in m.headers}) for m in messages]
            for message, (_, headers), entry in zip(
                messages, found, await sealed.open_entries(keys, found), strict=True
            ):
                states[entry.state] += 1
                line = entry_line(message.partition, message.offset, message.key, headers, entry)
                out.write(orjson.dumps(line) + b"\n")
            out.flush()
    finally:
        await consumer.stop()
        await pool.close()
    return states


def _cmd_dlq(settings: Settings, args: argparse.Namespace) -> int:
    from services.core.errors import ConfigError

    return run_printer(
        "dlq",
        lambda: print_dlq(settings, sys.stdout.buffer, idle=args.idle),
        lambda states: f"{sum(states.values())} entries; {tally(states)}",
        (ConfigError,),
    )


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    dlq = sub.add_parser(
        "dlq", help="print memory.dlq, one JSON entry per line: sealed entries opened, forgotten users' marked"
    )
    dlq.add_argument("--idle", type=float, default=2.0, help="stop after this many seconds with no entry")
    dlq.set_defaults(func=_cmd_dlq)
