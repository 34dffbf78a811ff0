"""`memstream kafka-users`: who may connect to the embedded broker when Kafka authentication is on.

The users live in data_dir/kafka-users.json (SCRAM keys only, mode 0600),
read by the running gate on each login, so a change needs no restart. Each
user has a role the gate enforces on every request (ops/kafka_acl.py):
producer (writes chat.turns only), subscriber (reads memory.changes only,
in its own consumer groups) or worker (everything: memstream's own
processes). A Kafka cluster of your own (docker-compose) manages its users
and ACLs itself (kafka-configs.sh, kafka-acls.sh); this command is for the
embedded stack only.
"""

from __future__ import annotations

import argparse
import secrets
import sys
from typing import Any

from ops.kafka_acl import DEFAULT_ROLE, ROLES
from services.core.config import Settings


def _store(settings: Settings) -> Any:
    from ops.embedded.broker import kafka_users_path
    from ops.scram import UserStore

    return UserStore(kafka_users_path(settings))


def _cmd_add(settings: Settings, args: argparse.Namespace) -> int:
    generated = not args.password_stdin
    password = secrets.token_urlsafe(24) if generated else sys.stdin.readline().rstrip("\n")
    if not password:
        print("an empty password is not allowed", file=sys.stderr)
        return 2
    store = _store(settings)
    try:
        store.put(args.name, password, role=args.role)
    except ValueError as exc:
        print(exc, file=sys.stderr)
        return 2
    print(
        f"Kafka user {args.name!r} ({args.role}; SCRAM-SHA-256 and SCRAM-SHA-512) saved in {store.path};"
        " in effect at its next connection"
    )
    if generated:
        print(f"password (shown once, keep it in your chat service's secrets): {password}")
    return 0


def _cmd_list(settings: Settings, _: argparse.Namespace) -> int:
    store = _store(settings)
    users = store.users()
    for name, mechanisms in sorted(users.items()):
        role = store.role(name)
        shown = role or f"{DEFAULT_ROLE} (no role stored: allowed everything; set one with add --role)"
        print(f"{name}\t{shown}\t{', '.join(sorted(mechanisms))}")
        if role is None:
            print(
                f"warning: Kafka user {name!r} has no role and is treated as {DEFAULT_ROLE} (every topic);"
                f" give it the one it needs: memstream kafka-users add {name} --role producer|subscriber|worker",
                file=sys.stderr,
            )
    if not users:
        print("no Kafka users (Kafka authentication is off unless MEMSTREAM_KAFKA_SASL_* is set)", file=sys.stderr)
    return 0


def _cmd_remove(settings: Settings, args: argparse.Namespace) -> int:
    if not _store(settings).remove(args.name):
        print(f"no Kafka user {args.name!r}", file=sys.stderr)
        return 1
    print(f"Kafka user {args.name!r} removed; its new connections are refused (open ones stay until they close)")
    return 0


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    users = sub.add_parser(
        "kafka-users",
        help="SCRAM users of the embedded Kafka broker (Kafka authentication on: MEMSTREAM_KAFKA_SASL_*)",
        description=__doc__,
    )
    users_sub = users.add_subparsers(dest="kafka_users_command", required=True)
    add = users_sub.add_parser("add", help="create a user or change its password; a generated password is printed once")
    add.add_argument("name", help="the user name a chat service sends as sasl.username")
    add.add_argument("--password-stdin", action="store_true", help="take the password from the first line of stdin")
    add.add_argument(
        "--role",
        required=True,
        choices=ROLES,
        help="producer: write chat.turns only (chat services); subscriber: read memory.changes only, consumer"
        " groups named NAME or NAME.* / NAME-* / NAME_*; worker: everything (memstream's own processes)",
    )
    add.set_defaults(func=_cmd_add)
    users_sub.add_parser("list", help="user names, their roles and their mechanisms").set_defaults(func=_cmd_list)
    remove = users_sub.add_parser("remove", help="delete a user")
    remove.add_argument("name")
    remove.set_defaults(func=_cmd_remove)
