"""`memstream produce FILE`: JSON lines of chat turns onto chat.turns, as a chat service would send them."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from services.core.config import Settings


def _cmd_produce(settings: Settings, args: argparse.Namespace) -> int:
    from services.core import tracing
    from services.core.kafka_auth import confluent_config
    from services.kafka.producer import ProduceFailed, TurnProducer

    source = sys.stdin.buffer if args.file == "-" else Path(args.file).open("rb")  # noqa: SIM115
    lines = [line.rstrip(b"\n") for line in source if line.strip()]

    async def send() -> int:
        async with TurnProducer(settings.kafka_bootstrap, config=confluent_config(settings)) as producer:
            with tracing.tracer().start_as_current_span("produce turns") as span:
                span.set_attribute(tracing.EVENTS, len(lines))
                return await producer.send_raw(lines)

    tracing.configure("produce")
    try:
        print(f"produced {asyncio.run(send())} events to chat.turns")
    except ProduceFailed as exc:
        # Some lines may be on the topic: sending them all again is safe (an event id is applied once).
        print(f"not every event was acknowledged by {settings.kafka_bootstrap}: {exc}", file=sys.stderr)
        return 1
    finally:
        tracing.shutdown()  # the batched spans are exported before the command exits
    return 0


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`sub` is the `memstream` parser's subparsers object."""
    produce = sub.add_parser("produce", help="produce JSON lines of turns to chat.turns")
    produce.add_argument("file", help="path, or - for stdin")
    produce.set_defaults(func=_cmd_produce)
