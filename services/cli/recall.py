"""`memstream recall QUERY`: ask the read service what memory holds for a user, as a chat service would."""

from __future__ import annotations

import argparse
import json
import sys

import httpx

from services.core.config import Settings


def _cmd_recall(settings: Settings, args: argparse.Namespace) -> int:
    from services.auth.client import client_headers

    body = {"tenant_id": args.tenant, "user_id": args.user, "query": args.query, "top_k": args.top_k}
    response = httpx.post(
        f"{settings.http_base_url}/v1/recall", json=body, headers=client_headers(settings), timeout=30
    )
    if response.status_code != 200:
        print(f"error {response.status_code}: {response.text}", file=sys.stderr)
        return 1
    data = response.json()
    print(json.dumps(data, indent=2) if args.json else data["prompt"])
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
