"""The embedded Postgres asks every connection for its generated password; an old `trust` data dir is moved over."""

from __future__ import annotations

import contextlib
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from ops.embedded.postgres import (
    hba_trusts,
    pg_bin,
    pg_password,
    postgres_child,
    require_password,
)
from ops.embedded.postgres import open_path_for as _open_path_for
from ops.embedded.postgres import system_user as _system_user
from ops.embedded.supervision import Child, wait_until
from ops.embedded.supervision import as_user as _as_user
from services.core.config import Settings
from services.core.errors import StackError
from services.core.pgpass import passfile_path, read_password, with_passfile
from tests.pg import _free_port, embedded_postgres


@pytest.fixture(autouse=True)
def no_ambient_password(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Only what the DSN names may supply a password (no PGPASSWORD, no ~/.pgpass)."""
    monkeypatch.delenv("PGPASSWORD", raising=False)
    monkeypatch.setenv("PGPASSFILE", str(tmp_path / "no-such-pgpass"))


def _connect(dsn: str) -> None:
    with psycopg.connect(make_conninfo(dsn, dbname="postgres"), connect_timeout=5) as conn:
        conn.execute("SELECT 1")


def _bare(dsn: str) -> str:
    """The same server, database and user, without the password file."""
    info = psycopg.conninfo.conninfo_to_dict(dsn)
    info.pop("passfile", None)
    return make_conninfo("", **{k: str(v) for k, v in info.items()})


def test_a_new_data_dir_requires_the_generated_password_for_every_connection(tmp_path: Path) -> None:
    with embedded_postgres(tmp_path) as server:
        secret = passfile_path(tmp_path)
        assert stat.S_IMODE(secret.stat().st_mode) == 0o600
        password = read_password(secret)
        assert password is not None
        assert len(password) >= 32
        hba = (tmp_path / "pg" / "pg_hba.conf").read_text()
        assert not hba_trusts(hba)
        rules = [line.split() for line in hba.splitlines() if line.strip() and not line.startswith("#")]
        assert {r[0] for r in rules} >= {"local", "host"}
        assert all(r[-1] == "scram-sha-256" for r in rules)

        _connect(server.dsn)
        with pytest.raises(psycopg.OperationalError, match="password"):
            _connect(_bare(server.dsn))
        with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
            _connect(make_conninfo(_bare(server.dsn), password="not-the-password"))
        _connect(make_conninfo(_bare(server.dsn), password=password))
        assert password not in server.dsn


@contextlib.contextmanager
def _started(child: Child, dsn: str) -> Iterator[None]:
    child.start()
    try:
        wait_until(lambda: _connect(dsn) is None, 60, "postgres")
        yield
    finally:
        child.stop()


def test_a_data_dir_created_with_trust_is_moved_to_a_password_on_start_and_keeps_its_data(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, pg_dsn=f"postgresql://memstream@127.0.0.1:{_free_port()}/postgres")
    data = settings.pg_data.resolve()
    data.mkdir(parents=True)
    user = _system_user()
    if user:
        _open_path_for(user, data)
    subprocess.run(
        [pg_bin("initdb"), "-D", str(data), "-U", "memstream", "--auth=trust", "--no-instructions"],
        **_as_user(user),
        check=True,
        capture_output=True,
    )
    assert hba_trusts((data / "pg_hba.conf").read_text())
    (tmp_path / "logs").mkdir()
    child = postgres_child(settings, tmp_path / "logs")  # the password is generated here, the data dir kept
    dsn = with_passfile(settings.pg_dsn, tmp_path)
    password = read_password(passfile_path(tmp_path))
    assert password is not None
    with _started(child, dsn):
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CREATE TABLE kept (v text)")
            conn.execute("INSERT INTO kept VALUES ('from the trust days')")
        _connect(_bare(dsn))  # still trusted

        moved = settings.model_copy(update={"pg_dsn": dsn})
        assert require_password(moved, password)
        assert not hba_trusts((data / "pg_hba.conf").read_text())
        wait_until(lambda: _refused(_bare(dsn)), 10, "pg_hba.conf reload")
        with psycopg.connect(dsn) as conn:
            assert conn.execute("SELECT v FROM kept").fetchall() == [("from the trust days",)]
        assert not require_password(moved, password)  # once is enough

    # Started again: the same password, nothing to move.
    child = postgres_child(settings, tmp_path / "logs")
    assert read_password(passfile_path(tmp_path)) == password
    with _started(child, dsn):
        assert not require_password(settings.model_copy(update={"pg_dsn": dsn}), password)
        assert _refused(_bare(dsn))


def _refused(dsn: str) -> bool:
    try:
        _connect(dsn)
    except psycopg.OperationalError:
        return True
    return False


def test_a_password_protected_data_dir_whose_password_file_is_gone_is_not_given_a_new_one(tmp_path: Path) -> None:
    with embedded_postgres(tmp_path):
        pass
    secret = passfile_path(tmp_path)
    old = read_password(secret)
    secret.unlink()
    settings = Settings(data_dir=tmp_path, pg_dsn="postgresql://memstream@127.0.0.1:5999/memstream")
    with pytest.raises(StackError, match="requires a password"):
        pg_password(settings)
    assert not secret.exists()
    assert old is not None
