"""`memstream keys create | list | revoke` as a user runs them: a subprocess against a real Postgres."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest

from services.auth.keys import key_hash
from services.auth.secret import SECRET_FILE
from tests.stack import ROOT, run_cli


class Cli:
    def __init__(self, data_dir: Path, pg_dsn: str) -> None:
        self.env = {**os.environ, "MEMSTREAM_DATA_DIR": str(data_dir), "MEMSTREAM_PG_DSN": pg_dsn}
        self.data_dir = data_dir
        self.pg_dsn = pg_dsn

    def __call__(self, *args: str) -> subprocess.CompletedProcess[str]:
        return run_cli(self.env, "keys", *args, timeout=120)

    def listed(self, *args: str) -> list[dict[str, Any]]:
        done = self("list", "--json", *args)
        assert done.returncode == 0, done.stderr
        found: list[dict[str, Any]] = json.loads(done.stdout)
        return found

    def stored_hash(self, key_id: str) -> bytes:
        with psycopg.connect(self.pg_dsn) as conn:
            row = conn.execute("SELECT key_hash FROM api_keys WHERE id = %s", (key_id,)).fetchone()
        assert row is not None
        return bytes(row[0])


@pytest.fixture
def cli(tmp_path: Path, pg_dsn: str) -> Cli:
    return Cli(tmp_path / "data", pg_dsn)


def test_create_prints_the_key_once_and_stores_only_its_keyed_hash(cli: Cli) -> None:
    done = cli("create", "--tenant", "acme", "--role", "write", "--name", "chat backend")
    assert done.returncode == 0, done.stderr
    key = done.stdout.strip()
    assert key.startswith("ms_")
    assert len(done.stdout.splitlines()) == 1  # stdout is the key alone: KEY=$(memstream keys create ...)
    assert "only time" in done.stderr
    (listed,) = cli.listed()
    assert listed["id"] in done.stderr
    assert (listed["tenant_id"], listed["role"], listed["name"]) == ("acme", "write", "chat backend")
    assert key.startswith(listed["hint"])
    assert listed["last_used_at"] is None
    assert listed["revoked_at"] is None
    assert key not in cli("list").stdout
    # The hash is keyed with the secret the CLI generated into the data dir, readable by its owner only.
    secret_file = cli.data_dir / SECRET_FILE
    assert stat.S_IMODE(secret_file.stat().st_mode) == 0o600
    assert cli.stored_hash(listed["id"]) == key_hash(secret_file.read_text().strip().encode(), key)


def test_operator_keys_listing_by_tenant_and_revocation(cli: Cli) -> None:
    refused = cli("create", "--role", "write")
    assert refused.returncode == 2
    assert "--tenant" in refused.stderr
    assert cli("create", "--tenant", "bad:tenant").returncode == 2
    assert cli.listed() == []

    operator = cli("create", "--role", "admin", "--name", "ops")
    assert operator.returncode == 0, operator.stderr
    assert "operator key" in operator.stderr
    assert cli("create", "--tenant", "acme").returncode == 0
    assert cli("create", "--tenant", "globex", "--role", "admin").returncode == 0

    everything = cli.listed()
    assert [(k["tenant_id"], k["role"]) for k in everything] == [(None, "admin"), ("acme", "read"), ("globex", "admin")]
    assert [k["tenant_id"] for k in cli.listed("--tenant", "acme")] == ["acme"]
    table = cli("list").stdout.splitlines()
    assert table[0].split()[:4] == ["ID", "TENANT", "ROLE", "NAME"]
    assert len(table) == 4

    acme = everything[1]["id"]
    revoked = cli("revoke", acme)
    assert revoked.returncode == 0, revoked.stderr
    assert "within 5 s" in revoked.stdout
    assert cli("revoke", acme).returncode == 1  # already revoked
    assert cli("revoke", "no-such-id").returncode == 1
    after = {k["id"]: k for k in cli.listed()}
    assert after[acme]["revoked_at"] is not None
    assert sum(k["revoked_at"] is None for k in after.values()) == 2


def test_keys_help_explains_roles_and_operator_keys(cli: Cli) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "services.cli", "keys", "create", "--help"],
        cwd=ROOT,
        env=cli.env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert "operator key" in done.stdout
    assert "admin" in done.stdout
