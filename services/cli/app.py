"""`memstream` command line: run the stack or its parts, produce, recall, status."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
from datetime import UTC, datetime
from pathlib import Path

import httpx

from services.cli.changes import add_parser as add_changes_parser
from services.cli.dlq import add_parser as add_dlq_parser
from services.cli.kafka_users import add_parser as add_kafka_users_parser
from services.cli.keys import add_parser as add_keys_parser
from services.cli.mcp import add_parser as add_mcp_parser
from services.cli.memories import add_parser as add_memories_parser
from services.cli.rebuild import add_parser as add_rebuild_parser
from services.core.config import Settings


def _cmd_up(settings: Settings, _: argparse.Namespace) -> int:
    from ops.embedded import run

    return run(settings)


def _cmd_worker(settings: Settings, args: argparse.Namespace) -> int:
    from services.process.runner import run_worker

    run_worker(settings, with_api=args.with_api, stages=args.stages)
    return 0


def _stages(text: str) -> tuple[str, ...]:
    """`--stages` names, checked while parsing: a wrong name is a usage error, before anything starts."""
    from services.core.stages import UnknownStage, parse_stages

    try:
        return parse_stages(text)
    except UnknownStage as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _cmd_serve(settings: Settings, _: argparse.Namespace) -> int:
    from services.process.runner import run_api

    run_api(settings)
    return 0


def _cmd_topics(settings: Settings, args: argparse.Namespace) -> int:
    from ops.topics import create_topics, load_specs
    from services.core.kafka_auth import confluent_config

    specs = load_specs(settings.topics_file)
    created = asyncio.run(create_topics(settings.kafka_bootstrap, specs, confluent_config(settings)))
    print(f"{len(specs)} topics declared, {len(created)} created: {', '.join(created) or '-'}")
    return 0


def _cmd_migrate(settings: Settings, _: argparse.Namespace) -> int:
    from services.stores.postgres import migrate

    applied = asyncio.run(migrate(settings.pg_dsn))
    print(f"applied migrations: {applied or 'none pending'}")
    return 0


def _cmd_produce(settings: Settings, args: argparse.Namespace) -> int:
    from services.core.kafka_auth import confluent_config
    from services.kafka.producer import ProduceFailed, TurnProducer

    source = sys.stdin.buffer if args.file == "-" else Path(args.file).open("rb")  # noqa: SIM115
    lines = [line.rstrip(b"\n") for line in source if line.strip()]

    async def send() -> int:
        async with TurnProducer(settings.kafka_bootstrap, config=confluent_config(settings)) as producer:
            return await producer.send_raw(lines)

    try:
        print(f"produced {asyncio.run(send())} events to chat.turns")
    except ProduceFailed as exc:
        # Some lines may be on the topic: sending them all again is safe (an event id is applied once).
        print(f"not every event was acknowledged by {settings.kafka_bootstrap}: {exc}", file=sys.stderr)
        return 1
    return 0


def _cmd_recall(settings: Settings, args: argparse.Namespace) -> int:
    body = {"tenant_id": args.tenant, "user_id": args.user, "query": args.query, "top_k": args.top_k}
    from services.auth.client import client_headers

    response = httpx.post(
        f"{settings.http_base_url}/v1/recall", json=body, headers=client_headers(settings), timeout=30
    )
    if response.status_code != 200:
        print(f"error {response.status_code}: {response.text}", file=sys.stderr)
        return 1
    data = response.json()
    print(json.dumps(data, indent=2) if args.json else data["prompt"])
    return 0


def _cmd_status(settings: Settings, _: argparse.Namespace) -> int:
    try:
        response = httpx.get(f"{settings.http_base_url}/readyz", timeout=10)
    except httpx.HTTPError as exc:
        print(f"read service not reachable at {settings.http_base_url}: {exc}")
        return 1
    print(json.dumps(response.json(), indent=2))
    return 0 if response.status_code == 200 else 1


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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="memstream", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("up", help="start the embedded stack (broker, Postgres, worker, read service)").set_defaults(
        func=_cmd_up
    )
    worker = sub.add_parser("worker", help="run pipeline stages against configured Kafka, Postgres, Qdrant")
    worker.add_argument("--with-api", action="store_true", help="also serve the read service in this process")
    worker.add_argument(
        "--stages",
        type=_stages,
        default="all",
        help="comma-separated stages to run, each its own consumer group: window, summarizer, embedder,"
        " consolidator, qdrant_sink (default: all)",
    )
    worker.set_defaults(func=_cmd_worker)
    sub.add_parser("serve", help="run the read service alone").set_defaults(func=_cmd_serve)
    topics = sub.add_parser("topics", help="topic administration")
    topics_sub = topics.add_subparsers(dest="topics_command", required=True)
    topics_sub.add_parser("create", help="create topics from topics.yaml (idempotent)").set_defaults(func=_cmd_topics)
    sub.add_parser("migrate", help="apply Postgres migrations").set_defaults(func=_cmd_migrate)
    produce = sub.add_parser("produce", help="produce JSON lines of turns to chat.turns")
    produce.add_argument("file", help="path, or - for stdin")
    produce.set_defaults(func=_cmd_produce)
    recall = sub.add_parser("recall", help="ask the read service")
    recall.add_argument("--tenant", required=True)
    recall.add_argument("--user", required=True)
    recall.add_argument("--top-k", type=int, default=10)
    recall.add_argument("--json", action="store_true")
    recall.add_argument("query")
    recall.set_defaults(func=_cmd_recall)
    sub.add_parser("status", help="readiness of Kafka, Postgres and Qdrant").set_defaults(func=_cmd_status)
    maintain = sub.add_parser("maintain", help="one maintenance pass: decay, prune, patterns, semantic topics")
    maintain.add_argument("--now", type=_aware_time, default=None, help="ISO-8601 time to run as of (default: now)")
    maintain.add_argument("--tenant", help="only this tenant")
    maintain.add_argument("--user", help="only this user")
    maintain.set_defaults(func=_cmd_maintain)
    add_keys_parser(sub)
    add_kafka_users_parser(sub)
    add_mcp_parser(sub)
    add_memories_parser(sub)
    add_rebuild_parser(sub)
    add_changes_parser(sub)
    add_dlq_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from services.core.generations import scoped

    settings = scoped(Settings())  # MEMSTREAM_GENERATION: this process's schema, topics, groups and index
    logging.basicConfig(level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    code: int = args.func(settings, args)
    return code
