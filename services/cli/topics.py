"""`memstream topics create`: the topics of topics.yaml on the configured broker (idempotent)."""

from __future__ import annotations

import argparse
import asyncio

from services.core.config import Settings


def _cmd_create(settings: Settings, _: argparse.Namespace) -> int:
    from ops.topics import create_topics, load_specs
    from services.core.kafka_auth import confluent_config

    specs = load_specs(settings.topics_file)
    created = asyncio.run(create_topics(settings.kafka_bootstrap, specs, confluent_config(settings)))
    print(f"{len(specs)} topics declared, {len(created)} created: {', '.join(created) or '-'}")
    return 0


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`sub` is the `memstream` parser's subparsers object."""
    topics = sub.add_parser("topics", help="topic administration")
    topics_sub = topics.add_subparsers(dest="topics_command", required=True)
    topics_sub.add_parser("create", help="create topics from topics.yaml (idempotent)").set_defaults(func=_cmd_create)
