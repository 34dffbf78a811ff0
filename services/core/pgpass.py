"""The embedded Postgres password: generated once, kept in data_dir/pgpass, named (not spelled) in the DSN.

The file is in libpq's own passfile format (`host:port:db:user:password`,
mode 0600), so a DSN only has to say `passfile=...` and every libpq client
(psycopg, psql) reads the secret itself: the DSN can be logged and the
secret is in one file, not in environments or process titles.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from psycopg.conninfo import conninfo_to_dict, make_conninfo

FILE_NAME = "pgpass"


def passfile_path(data_dir: Path) -> Path:
    return data_dir / FILE_NAME


def generate_password() -> str:
    """URL-safe, so it needs no escaping in the passfile (no ':' or '\\') nor in a URL."""
    return secrets.token_urlsafe(32)


def with_passfile(dsn: str, data_dir: Path) -> str:
    """`dsn` naming data_dir/pgpass, when that file exists and the DSN names no password or passfile of its own."""
    info = conninfo_to_dict(dsn)
    path = passfile_path(data_dir)
    if "password" in info or "passfile" in info or not path.exists():
        return dsn
    return make_conninfo(dsn, passfile=str(path.resolve()))


def read_password(path: Path) -> str | None:
    """The password of the file's first entry, or None when there is no file."""
    try:
        lines = [line for line in path.read_text().splitlines() if line.strip() and not line.startswith("#")]
    except FileNotFoundError:
        return None
    return lines[0].split(":", 4)[4] if lines else None


def write_passfile(path: Path, host: str, port: int, user: str, password: str) -> None:
    """One entry for exactly this server and user: the secret is offered to no other host (mode 0600).

    libpq ignores a passfile that group or others can read, so the mode is
    part of it working, not only of it being secret.
    """
    if ":" in password or "\\" in password:
        raise ValueError("a generated password never holds ':' or '\\'")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(f"{host}:{port}:*:{user}:{password}\n")
    path.chmod(0o600)
