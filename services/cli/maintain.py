"""`memstream maintain`: one maintenance pass (decay, prune, patterns, semantic topics), as of now or a given time."""

from __future__ import annotations

import argparse
import asyncio
from datetime import UTC, datetime

from services.core.config import Settings


def _cmd_maintain(settings: Settings, args: argparse.Namespace) -> int:
    from agents.maintenance.standalone import maintain_once

    now = args.now or datetime.now(UTC)
    counts = asyncio.run(maintain_once(settings, now, args.tenant, args.user))
    print(f"maintenance as of {now.isoformat()}: " + ", ".join(f"{k}={v}" for k, v in sorted(counts.items())))
    return 0


def _aware_time(text: str) -> datetime:
    """An ISO-8601 time; without an offset it is taken as UTC."""
    when = datetime.fromisoformat(text)
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`sub` is the `memstream` parser's subparsers object."""
    maintain = sub.add_parser("maintain", help="one maintenance pass: decay, prune, patterns, semantic topics")
    maintain.add_argument("--now", type=_aware_time, default=None, help="ISO-8601 time to run as of (default: now)")
    maintain.add_argument("--tenant", help="only this tenant")
    maintain.add_argument("--user", help="only this user")
    maintain.set_defaults(func=_cmd_maintain)
