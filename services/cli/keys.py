"""`memstream keys create | list | revoke`: API keys, straight in Postgres (the read service need not run).

The hashing secret is the read service's (MEMSTREAM_AUTH_SECRET, or
data_dir/auth-secret): run these with the same data dir or secret as the
service, or the keys they create will not verify there.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

from services.core.config import Settings

if TYPE_CHECKING:  # the handlers import Postgres code when they run, so `memstream --help` stays quick
    from services.auth import ApiKey, KeyStore

T = TypeVar("T")
OPERATOR = "*"
ROLES = ("read", "write", "admin")


async def _with_store(settings: Settings, work: Callable[[KeyStore], Awaitable[T]]) -> T:
    from services.auth import KeyStore
    from services.stores.postgres import PgPool, migrate

    await migrate(settings.pg_dsn)
    pool = PgPool(settings.pg_dsn, 1, connect_timeout=settings.pg_connect_timeout)
    await pool.open()
    try:
        return await work(KeyStore(pool))
    finally:
        await pool.close()


def _when(at: datetime | None) -> str:
    return at.astimezone().isoformat(timespec="seconds") if at is not None else "-"


def _as_json(key: ApiKey) -> dict[str, Any]:
    return {
        "id": key.id,
        "tenant_id": key.tenant_id,
        "role": key.role.value,
        "name": key.name,
        "hint": key.hint,
        "created_at": key.created_at.isoformat(),
        "last_used_at": key.last_used_at.isoformat() if key.last_used_at else None,
        "revoked_at": key.revoked_at.isoformat() if key.revoked_at else None,
    }


def _create(settings: Settings, args: argparse.Namespace) -> int:
    from pydantic import TypeAdapter, ValidationError

    from schemas import Identifier
    from services.auth import Role, load_secret

    role = Role(args.role)
    tenant: str | None = args.tenant
    if tenant is None and role is not Role.ADMIN:
        print("error: a read or write key needs --tenant (only an admin key may be an operator key)", file=sys.stderr)
        return 2
    if tenant is not None:
        try:
            TypeAdapter(Identifier).validate_python(tenant)
        except ValidationError as exc:
            print(f"error: --tenant: {exc.errors()[0]['msg']}", file=sys.stderr)
            return 2
        if settings.tenants is not None and tenant not in settings.tenants:
            print(f"error: tenant {tenant!r} is not in MEMSTREAM_TENANTS", file=sys.stderr)
            return 2
    secret = load_secret(settings)
    record, key = asyncio.run(
        _with_store(settings, lambda store: store.create(secret, tenant_id=tenant, role=role, name=args.name))
    )
    # The key alone on stdout, so `KEY=$(memstream keys create ...)` works; the rest is for the person.
    print(key)
    scope = f"tenant {tenant}" if tenant is not None else "every tenant (operator key)"
    print(
        f"created key {record.id}: {scope}, role {role}{f', name {args.name!r}' if args.name else ''}. "
        "This is the only time the key is shown: store it now.",
        file=sys.stderr,
    )
    return 0


def _list(settings: Settings, args: argparse.Namespace) -> int:
    found = asyncio.run(_with_store(settings, lambda store: store.list_keys(args.tenant)))
    if args.json:
        print(json.dumps([_as_json(k) for k in found], indent=2))
        return 0
    header = ("ID", "TENANT", "ROLE", "NAME", "KEY", "CREATED", "LAST USED", "REVOKED")
    rows = [
        (
            k.id,
            k.tenant_id if k.tenant_id is not None else OPERATOR,
            k.role.value,
            k.name or "-",
            k.hint + "…",
            _when(k.created_at),
            _when(k.last_used_at),
            _when(k.revoked_at),
        )
        for k in found
    ]
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        print("  ".join(str(cell).ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
    return 0


def _revoke(settings: Settings, args: argparse.Namespace) -> int:
    revoked = asyncio.run(_with_store(settings, lambda store: store.revoke(args.id)))
    if revoked is None:
        print(f"error: no active key {args.id!r} (see memstream keys list)", file=sys.stderr)
        return 1
    print(
        f"revoked key {revoked.id}; running services refuse it within {settings.auth_cache_seconds:g} s "
        "(MEMSTREAM_AUTH_CACHE_SECONDS)"
    )
    return 0


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`sub` is the `memstream` parser's subparsers object."""
    keys = sub.add_parser(
        "keys",
        help="API keys: create, list, revoke",
        description="API keys for the read service. Every /v1 request needs `Authorization: Bearer <key>`. "
        "A key belongs to one tenant and has a role (read < write < admin); an admin key created without "
        "--tenant is an operator key, valid for every tenant. Keys are stored hashed: a key is shown once.",
    )
    keys_sub = keys.add_subparsers(dest="keys_command", required=True)
    create = keys_sub.add_parser(
        "create",
        help="create a key and print it (once)",
        description="Create an API key and print it on stdout (details on stderr). It cannot be shown again.",
    )
    create.add_argument("--tenant", help="tenant the key is bound to; omit it, with --role admin, for an operator key")
    create.add_argument(
        "--role",
        choices=ROLES,
        default="read",
        help="read: recall, list, history, working window, export; write: also ingest turns and add, correct, "
        "delete memories; admin: also forget users, import, manage keys (default: read)",
    )
    create.add_argument("--name", default="", help="a label to recognise the key by in `keys list`")
    create.set_defaults(func=_create)
    listing = keys_sub.add_parser(
        "list", help="list keys (never the keys themselves)", description="List API keys, revoked ones included."
    )
    listing.add_argument("--tenant", help="only this tenant's keys")
    listing.add_argument("--json", action="store_true", help="JSON instead of a table")
    listing.set_defaults(func=_list)
    revoke = keys_sub.add_parser(
        "revoke",
        help="revoke a key by its id",
        description="Revoke an API key; running read services refuse it within MEMSTREAM_AUTH_CACHE_SECONDS.",
    )
    revoke.add_argument("id", help="the key's id, from `keys list` or `keys create`")
    revoke.set_defaults(func=_revoke)
