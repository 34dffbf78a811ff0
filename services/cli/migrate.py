"""`memstream migrate`: apply the pending Postgres migrations."""

from __future__ import annotations

import argparse
import asyncio

from services.core.config import Settings


def _cmd_migrate(settings: Settings, _: argparse.Namespace) -> int:
    from services.stores.postgres import migrate

    applied = asyncio.run(migrate(settings.pg_dsn))
    print(f"applied migrations: {applied or 'none pending'}")
    return 0


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`sub` is the `memstream` parser's subparsers object."""
    sub.add_parser("migrate", help="apply Postgres migrations").set_defaults(func=_cmd_migrate)
