"""`memstream recall QUERY`: ask the read service what memory holds for a user, as a chat service would."""

from __future__ import annotations

import argparse
import json

from services.cli.memories import call_api
from services.core.config import Settings


def _cmd_recall(settings: Settings, args: argparse.Namespace) -> int:
    found = call_api(
        settings,
        lambda c: c.recall(args.tenant, args.user, args.query, top_k=args.top_k),
        base_url=settings.http_base_url,
        timeout=30,
    )
    if found is None:
        return 1
    print(json.dumps(found.model_dump(mode="json"), indent=2) if args.json else found.prompt)
    return 0


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`sub` is the `memstream` parser's subparsers object."""
    recall = sub.add_parser("recall", help="ask the read service")
    recall.add_argument("--tenant", required=True)
    recall.add_argument("--user", required=True)
    recall.add_argument("--top-k", type=int, default=10)
    recall.add_argument("--json", action="store_true")
    recall.add_argument("query")
    recall.set_defaults(func=_cmd_recall)
