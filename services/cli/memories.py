"""`memstream memories list|add|correct|delete|export|import` and `memstream forget-user`: one user's memory.

Thin clients of the read service's HTTP API (MEMSTREAM_API_URL, else the
local one) through the memstream client, with the key from MEMSTREAM_API_KEY or data_dir/api-key, so
they go through the same checks, tenant binding and command log as any
client. `--tenant` may be left out with a tenant's own key.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from memstream import APIError, Client, CommandReceipt, MemoryFilters, TransportError
from services.auth.client import client_key
from services.core.config import Settings

T = TypeVar("T")

TYPES = ("fact", "preference", "episode", "exchange", "semantic", "pattern", "question")
STATUSES = ("active", "superseded", "merged", "pruned", "deleted")
WAIT_HELP = "answer once the change shows in recall (read your own write), not just once it is accepted"


def call_api(
    settings: Settings, use: Callable[[Client], T], *, base_url: str | None = None, timeout: float = 60
) -> T | None:
    """`use` on a client of the read service (the key from the environment or the data dir); None after
    printing why it failed: an error answer, or no service. No retries: the one running the command decides."""
    url = base_url or settings.api_base_url
    try:
        with Client(url, api_key=client_key(settings), timeout=timeout, retries=0) as client:
            return use(client)
    except TransportError as exc:
        print(f"memstream API not reachable at {url}: {exc}", file=sys.stderr)
    except APIError as exc:
        print(f"error {exc.status}: {exc.message} ({exc.code})", file=sys.stderr)
    return None


def _receipt(receipt: CommandReceipt | None) -> int:
    """A command's receipt on stdout as JSON; the exit status says whether it was accepted."""
    if receipt is None:
        return 1
    print(json.dumps(receipt.model_dump(mode="json"), indent=2))
    return 0


def _list(settings: Settings, args: argparse.Namespace) -> int:
    filters: MemoryFilters = {"limit": args.limit}
    if args.type is not None:
        filters["type"] = args.type
    if args.status != "any":
        filters["status"] = args.status
    if args.tenant is None:
        print("error: --tenant is required to list memories", file=sys.stderr)
        return 1
    memories = call_api(settings, lambda c: c.list_memories(args.tenant, args.user, **filters))
    if memories is None:
        return 1
    if args.json:
        print(json.dumps([m.model_dump(mode="json") for m in memories], indent=2))
        return 0
    for m in memories:
        keyed = f" [{m.category}/{m.key_name}={m.value}]" if m.key_name else ""
        print(f"{m.id}  {m.status:<10} {m.type:<10} {m.text}{keyed}")
    return 0


def _add(settings: Settings, args: argparse.Namespace) -> int:
    fields: dict[str, Any] = {"entities": args.entity or []}
    for field, value in (
        ("category", args.category),
        ("key_name", args.key),
        ("value", args.value),
        ("importance", args.importance),
        ("session_id", args.session),
    ):
        if value is not None:
            fields[field] = value
    return _receipt(
        call_api(
            settings,
            lambda c: c.add_memory(args.tenant, args.user, args.text, type=args.type, wait=args.wait, **fields),
        )
    )


def _correct(settings: Settings, args: argparse.Namespace) -> int:
    return _receipt(
        call_api(
            settings,
            lambda c: c.correct_memory(
                args.tenant, args.user, args.memory_id, args.text, value=args.value, wait=args.wait
            ),
        )
    )


def _delete(settings: Settings, args: argparse.Namespace) -> int:
    chosen = [x for x in (args.memory_id, args.session, args.topic) if x is not None]
    if len(chosen) != 1:
        print("name exactly one of: a memory id, --session, --topic", file=sys.stderr)
        return 2
    tenant, user, wait = args.tenant, args.user, args.wait

    def delete(c: Client) -> CommandReceipt:
        if args.memory_id is not None:
            return c.delete_memory(tenant, user, args.memory_id, wait=wait)
        if args.session is not None:
            return c.delete_session(tenant, user, args.session, wait=wait)
        return c.delete_memories(tenant, user, args.topic, wait=wait)

    return _receipt(call_api(settings, delete))


def _export(settings: Settings, args: argparse.Namespace) -> int:
    document = call_api(settings, lambda c: c.export(args.tenant, args.user, vectors=args.vectors))
    if document is None:
        return 1
    text = json.dumps(document, indent=2, ensure_ascii=False) + "\n"
    if args.output == "-":
        sys.stdout.write(text)
    else:
        Path(args.output).write_text(text, encoding="utf-8")
        counts = {k: len(v) for k, v in document.items() if isinstance(v, list)}
        print(f"exported to {args.output}: " + ", ".join(f"{k}={v}" for k, v in counts.items()), file=sys.stderr)
    return 0


def _import(settings: Settings, args: argparse.Namespace) -> int:
    raw = sys.stdin.read() if args.file == "-" else Path(args.file).read_text(encoding="utf-8")
    try:
        document = json.loads(raw)
    except ValueError as exc:
        print(f"{args.file}: not JSON: {exc}", file=sys.stderr)
        return 1
    return _receipt(call_api(settings, lambda c: c.import_document(args.tenant, args.user, document, wait=args.wait)))


def _forget(settings: Settings, args: argparse.Namespace) -> int:
    if not args.yes:
        print(
            f"this deletes everything held on user {args.user!r} (memories and their history, turns, sessions, "
            "index points) and cannot be undone; export first if in doubt. Pass --yes to go ahead.",
            file=sys.stderr,
        )
        return 2
    return _receipt(call_api(settings, lambda c: c.forget_user(args.tenant, args.user, wait=args.wait)))


def _scope(parser: argparse.ArgumentParser, func: Callable[[Settings, argparse.Namespace], int]) -> None:
    """A subcommand about one user, run by `func`."""
    parser.add_argument("--user", required=True, help="the user whose memory it is")
    parser.add_argument("--tenant", help="the tenant (default: the API key's; required with an operator key)")
    parser.set_defaults(func=func)


def _waits(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--wait", action="store_true", help=WAIT_HELP)


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`sub` is the `memstream` parser's subparsers object."""
    memories = sub.add_parser(
        "memories",
        help="one user's memories: list, add, correct, delete, export, import",
        description="View and change one user's memory through the read service. Every change is a command on "
        "memory.commands, applied in order with the user's other changes; --wait answers once it shows in recall.",
    )
    cmds = memories.add_subparsers(dest="memories_command", required=True)

    listing = cmds.add_parser("list", help="list memories", description="List a user's memories, oldest first.")
    _scope(listing, _list)
    listing.add_argument("--type", choices=TYPES, help="only this type")
    listing.add_argument(
        "--status", choices=(*STATUSES, "any"), default="active", help="only this status; any: history too"
    )
    listing.add_argument("--limit", type=int, default=1000, help="at most this many (default 1000)")
    listing.add_argument("--json", action="store_true", help="full records as JSON")

    add = cmds.add_parser(
        "add",
        help="add a memory by hand",
        description="Add a memory by hand: embedded and indexed like any other, provenance source manual. "
        "A keyed fact (--category, --key, --value) supersedes the user's current value of that key.",
    )
    _scope(add, _add)
    add.add_argument("--type", choices=TYPES, required=True, help="fact, preference, ...")
    add.add_argument("--text", required=True, help="the memory, as recall will show it")
    add.add_argument("--category", help="a keyed fact's category, e.g. location")
    add.add_argument("--key", help="a keyed fact's key, e.g. city (needs --category)")
    add.add_argument("--value", help="a keyed fact's value, e.g. Berlin (needs --key)")
    add.add_argument("--importance", type=float, help="0 to 1 (default 0.8)")
    add.add_argument("--session", help="the session it comes from (default: manual)")
    add.add_argument("--entity", action="append", help="a name it is about (repeatable)")
    _waits(add)

    correct = cmds.add_parser(
        "correct",
        help="correct a memory's text",
        description="Correct a memory: a new version with the new text supersedes it (the old one stays in its "
        "history), re-embedded and re-indexed.",
    )
    _scope(correct, _correct)
    correct.add_argument("memory_id", help="the memory to correct (its current version)")
    correct.add_argument("--text", required=True, help="the corrected text")
    correct.add_argument("--value", help="a keyed fact's corrected value")
    _waits(correct)

    delete = cmds.add_parser(
        "delete",
        help="delete one memory, a session's, or a topic's",
        description="Delete memories: one by id, every one derived from a session (--session), or every one "
        "about a topic or entity (--topic: its category, key or entity, or all of its words in the text). "
        "They leave recall and the index and stay in history as deleted until the user is forgotten.",
    )
    _scope(delete, _delete)
    delete.add_argument("memory_id", nargs="?", help="the memory to delete")
    delete.add_argument("--session", help="delete every memory derived from this session")
    delete.add_argument("--topic", help="delete every memory about this topic or entity")
    _waits(delete)

    export = cmds.add_parser(
        "export",
        help="export everything held on a user as JSON",
        description="Everything memstream holds on the user as one memstream.export/v1 document: memories with "
        "their history and provenance, raw turns, sessions and their windows.",
    )
    _scope(export, _export)
    export.add_argument("-o", "--output", default="-", help="file to write (default: stdout)")
    export.add_argument("--vectors", action="store_true", help="include each memory's embedding")

    load = cmds.add_parser(
        "import",
        help="import an export document into a user",
        description="Load a memstream.export/v1 document into a user who holds no data (another tenant, user or "
        "installation). Exporting that user afterwards gives the same document back.",
    )
    _scope(load, _import)
    load.add_argument("file", help="the document, or - for stdin")
    _waits(load)

    forget = sub.add_parser(
        "forget-user",
        help="delete everything held on a user",
        description="Forget a user: every row naming them in Postgres (memories and history, turns, sessions, "
        "summaries) and every index point. Afterwards the user is unknown to every route. Cannot be undone.",
    )
    _scope(forget, _forget)
    forget.add_argument("--yes", action="store_true", help="really do it")
    _waits(forget)
