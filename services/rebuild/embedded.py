"""What a rebuild needs of the embedded stack: whether its app runs, and a Postgres to read while it does not.

The app process of `memstream up` (read service + index sink) owns the
Qdrant Edge shard; it records its pid in data_dir/run/app.pid. An index
rebuild into the embedded shard must not run beside it. With the stack
stopped its Postgres is stopped too, so the rebuild starts that Postgres
(only it: no broker, no app) for as long as it reads, from the same data
directory and with the same password file `memstream up` uses.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg

from services.core.config import Settings
from services.core.errors import StackError
from services.core.pgpass import with_passfile

log = logging.getLogger("memstream.rebuild")

# What the app's command line holds (ops/embedded/app.py starts `services.cli worker --with-api`).
_APP_MARKERS = (b"services.cli", b"memstream")
START_TIMEOUT = 120.0


def running_app_pid(data_dir: Path) -> int | None:
    """The pid of the stack's app process when it is alive, else None (a stale pid file included)."""
    try:
        pid = int((data_dir / "run" / "app.pid").read_text().strip())
    except (OSError, ValueError):
        return None
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return pid if any(marker in cmdline for marker in _APP_MARKERS) else None


def postgres_answers(dsn: str) -> bool:
    try:
        with psycopg.connect(dsn, connect_timeout=2) as conn:
            conn.execute("SELECT 1")
    except psycopg.OperationalError:
        return False
    return True


@contextmanager
def postgres_for_rebuild(settings: Settings) -> Iterator[Settings]:
    """Settings whose DSN reaches a running Postgres: the configured one, else the embedded one, started here."""
    if postgres_answers(settings.pg_dsn):
        yield settings
        return
    if not (settings.pg_data / "PG_VERSION").exists():
        raise StackError(f"Postgres at {settings.pg_dsn} does not answer and {settings.pg_data} holds no database")
    from ops.embedded.postgres import ensure_database, postgres_child

    log_dir = settings.data_dir / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    child = postgres_child(settings, log_dir)
    log.info("starting the embedded Postgres for the rebuild (stack stopped)")
    child.start()
    try:
        # postgres_child wrote data_dir/pgpass: name it in the DSN, as `memstream up` does.
        ready = settings.model_copy(update={"pg_dsn": with_passfile(settings.pg_dsn, settings.data_dir)})
        admin = psycopg.conninfo.make_conninfo(ready.pg_dsn, dbname="postgres")

        deadline = time.monotonic() + START_TIMEOUT
        while not postgres_answers(admin):
            if not child.alive() or time.monotonic() > deadline:
                tail = " / ".join(child.log_path.read_text(errors="replace").splitlines()[-5:])
                raise StackError(f"the embedded Postgres did not start (its log ends: {tail})")
            time.sleep(0.2)
        ensure_database(ready.pg_dsn)
        yield ready
    finally:
        child.stop(signal.SIGINT)
        log.info("embedded Postgres stopped again")


def require_stack_stopped(settings: Settings) -> None:
    """Refuse while the app owning the embedded shard runs (see the module doc)."""
    pid = running_app_pid(settings.data_dir)
    if pid is not None and pid != os.getpid():
        raise StackError(
            f"the memstream app (pid {pid}) owns the Qdrant Edge shard in {settings.qdrant_path}: stop the stack "
            "(Ctrl-C or SIGTERM to `memstream up`), run the rebuild, then start it again"
        )
