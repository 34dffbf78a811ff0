"""`memstream changes` against a real Postgres (the users' keys), fed batches as the broker would hand them:
opened changes printed one JSON per line, scope by the Kafka key, forgotten users' changes skipped and counted.
The same command against a running stack is in tests/e2e/test_archive.py."""

from __future__ import annotations

import base64
import io
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime
from pathlib import Path

import orjson
from pydantic import SecretStr

from schemas import ChangeOp, MemoryChange, codec
from schemas.commands import UserForgotten
from services.archive.changes import seal_change
from services.archive.codec import MasterKey
from services.archive.keys import KeyStore
from services.cli.app import build_parser
from services.cli.changes import print_changes, wanted
from services.core.config import Settings
from services.kafka.log_end import Message
from services.stores.postgres import PgPool
from tests.factories import memory_record

NOW = datetime(2026, 5, 1, tzinfo=UTC)
SECRET = bytes(range(32))


def change(tenant: str, user: str, text: str) -> MemoryChange:
    record = memory_record(text, tenant=tenant, user=user, at=NOW)
    return MemoryChange(
        tenant_id=tenant, user_id=user, op=ChangeOp.ADDED, record=record, vector=[1.0], cause=["c"], committed_at=NOW
    )


async def batches(*values: Sequence[tuple[bytes, bytes]]) -> AsyncIterator[list[Message]]:
    for batch in values:
        yield [Message(0, n, key, value) for n, (key, value) in enumerate(batch)]


def test_the_scope_is_picked_by_the_kafka_key() -> None:
    assert wanted(b"acme:u1", None, None)
    assert wanted(b"acme:u1", "acme", None)
    assert wanted(b"acme:u1", None, "u1")
    assert wanted(b"acme:u1", "acme", "u1")
    assert not wanted(b"acme:u1", "other", None)
    assert not wanted(b"acme:u1", "acme", "u2")
    assert not wanted(None, "acme", None)
    assert wanted(None, None, None)


def test_the_subcommand_is_wired() -> None:
    args = build_parser().parse_args(["changes", "--from-beginning", "--tenant", "acme", "--user", "u1"])
    assert (args.from_beginning, args.follow, args.tenant, args.user) == (True, False, "acme", "u1")
    assert args.func.__module__ == "services.cli.changes"


async def test_changes_are_printed_opened_in_scope_and_a_forgotten_users_are_skipped(
    pool: PgPool, pg_dsn: str, tmp_path: Path
) -> None:
    settings = Settings(data_dir=tmp_path, pg_dsn=pg_dsn, master_key=SecretStr(base64.b64encode(SECRET).decode()))
    keys = KeyStore(pool, MasterKey(SECRET))
    mine, theirs = change("acme", "u1", "likes green tea"), change("acme", "gone", "a secret")
    other_tenant = change("other", "u1", "likes jazz")
    sealed = [
        (c.key, seal_change(await keys.get_or_create(c.tenant_id, c.user_id), c)) for c in (mine, theirs, other_tenant)
    ]
    async with pool.transaction("forget") as conn:
        await keys.forget(conn, "acme", "gone")
    gone = UserForgotten(tenant_id="acme", user_id="gone", cause=["f"], committed_at=NOW)

    out = io.BytesIO()
    printed, skipped = await print_changes(
        settings, batches(sealed[:2], [sealed[2], (gone.key, codec.dumps(gone)), (b"acme:x", b"{junk")]), out
    )
    lines = [orjson.loads(line) for line in out.getvalue().splitlines()]
    assert printed == len(lines) == 3
    assert [MemoryChange.model_validate(line) for line in lines[:2]] == [mine, other_tenant]
    assert UserForgotten.model_validate(lines[2]) == gone
    assert skipped == {"forgotten": 1, "malformed": 1}

    out = io.BytesIO()
    printed, skipped = await print_changes(settings, batches(sealed), out, tenant="acme", user="u1")
    assert [MemoryChange.model_validate_json(line) for line in out.getvalue().splitlines()] == [mine]
    assert skipped == {}  # other users' changes were never opened, nor their keys looked up
