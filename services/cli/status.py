"""`memstream status`: the read service's readiness (Kafka, Postgres, Qdrant); exit 1 when not ready or unreachable."""

from __future__ import annotations

import argparse
import json

from memstream import APIError, Client, TransportError
from services.core.config import Settings


def _cmd_status(settings: Settings, _: argparse.Namespace) -> int:
    try:
        with Client(settings.http_base_url, timeout=10, retries=0) as client:
            ready = client.readyz()
    except TransportError as exc:
        print(f"read service not reachable at {settings.http_base_url}: {exc}")
        return 1
    except APIError as exc:
        print(f"read service at {settings.http_base_url} answered {exc.status}: {exc.message} ({exc.code})")
        return 1
    print(json.dumps(ready.model_dump(mode="json"), indent=2))
    return 0 if ready.ready else 1


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`sub` is the `memstream` parser's subparsers object."""
    sub.add_parser("status", help="readiness of Kafka, Postgres and Qdrant").set_defaults(func=_cmd_status)
