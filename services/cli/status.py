"""`memstream status`: the read service's readiness (Kafka, Postgres, Qdrant); exit 1 when not ready or unreachable."""

from __future__ import annotations

import argparse
import json

import httpx

from services.core.config import Settings


def _cmd_status(settings: Settings, _: argparse.Namespace) -> int:
    try:
        response = httpx.get(f"{settings.http_base_url}/readyz", timeout=10)
    except httpx.HTTPError as exc:
        print(f"read service not reachable at {settings.http_base_url}: {exc}")
        return 1
    print(json.dumps(response.json(), indent=2))
    return 0 if response.status_code == 200 else 1


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`sub` is the `memstream` parser's subparsers object."""
    sub.add_parser("status", help="readiness of Kafka, Postgres and Qdrant").set_defaults(func=_cmd_status)
