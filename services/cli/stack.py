"""`memstream up | worker | serve`: run the whole embedded stack, or one of its processes against running services."""

from __future__ import annotations

import argparse

from services.core.config import Settings


def _cmd_up(settings: Settings, _: argparse.Namespace) -> int:
    from ops.embedded.stack import run

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


def _cmd_serve(settings: Settings, args: argparse.Namespace) -> int:
    """One read service, or (with --replicas N or MEMSTREAM_READ_REPLICAS) N replicas supervised by this process."""
    count = settings.read_replicas if args.replicas is None else args.replicas
    if settings.replica is None and count >= 1:
        from ops.embedded.replicas import run

        return run(settings, count)
    from services.process.runner import run_api

    run_api(settings)
    return 0


def _replica_count(text: str) -> int:
    count = int(text)
    if not 0 <= count <= 16:
        raise argparse.ArgumentTypeError("--replicas takes 0 to 16")
    return count


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`sub` is the `memstream` parser's subparsers object."""
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
    serve = sub.add_parser("serve", help="run the read service alone, or N read replicas on one port")
    serve.add_argument(
        "--replicas",
        type=_replica_count,
        default=None,
        help="read-service processes sharing the HTTP port, each with its own index fed from memory.changes"
        " (default: MEMSTREAM_READ_REPLICAS; 0 = one process, no replica index)",
    )
    serve.set_defaults(func=_cmd_serve)
