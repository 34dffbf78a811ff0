"""The `memstream` parser, assembled from one module per command, and the dispatch to the chosen command.

A command's code is in the module named after it (`memstream kafka-users` in
kafka_users.py); the modules holding more than one command are stack.py (up,
worker, serve), memories.py (memories, forget-user) and rebuild.py (rebuild,
generation). Each module's `add_parser` adds its commands and their handlers.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable

from services.cli import (
    changes,
    dlq,
    kafka_users,
    keys,
    maintain,
    mcp,
    memories,
    migrate,
    produce,
    rebuild,
    recall,
    stack,
    status,
    topics,
)
from services.core.config import Settings

DESCRIPTION = "`memstream` command line: run the stack or its parts, produce, recall, status."

# In the order `memstream --help` lists them.
COMMANDS: tuple[Callable[[argparse._SubParsersAction[argparse.ArgumentParser]], None], ...] = (
    stack.add_parser,
    topics.add_parser,
    migrate.add_parser,
    produce.add_parser,
    recall.add_parser,
    status.add_parser,
    maintain.add_parser,
    keys.add_parser,
    kafka_users.add_parser,
    mcp.add_parser,
    memories.add_parser,
    rebuild.add_parser,
    changes.add_parser,
    dlq.add_parser,
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="memstream", description=DESCRIPTION)
    sub = parser.add_subparsers(dest="command", required=True)
    for add_parser in COMMANDS:
        add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from services.core.generations import scoped

    settings = scoped(Settings())  # MEMSTREAM_GENERATION: this process's schema, topics, groups and index
    logging.basicConfig(level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    code: int = args.func(settings, args)
    return code
