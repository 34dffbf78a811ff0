"""A real embedded Postgres for store tests: started once per session, a fresh database per test.

It is started exactly as `memstream up` starts it, password included: every
test connection authenticates with scram-sha-256, through data_dir/pgpass.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg

from ops.embedded.postgres import ensure_database, postgres_child
from ops.embedded.supervision import Child, wait_until
from services.core.config import Settings
from services.core.pgpass import with_passfile
from services.runtime import Runtime
from services.stores.postgres import migrate


@dataclass
class PgServer:
    """A running server; `database()` hands out empty, migrated-on-demand databases."""

    dsn: str
    child: Child

    def database(self) -> str:
        name = f"t_{uuid.uuid4().hex[:12]}"
        dsn = psycopg.conninfo.make_conninfo(self.dsn, dbname=name)
        ensure_database(dsn)
        return dsn

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """SIGSTOP the postmaster and every backend (an outage that keeps sockets open); SIGCONT after."""
        assert self.child.proc is not None
        postmaster = self.child.proc.pid
        # Backends call setsid(), so the postmaster's process group does not reach them.
        stopped = [postmaster, *children_of(postmaster)]
        try:
            for pid in stopped:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGSTOP)
            yield
        finally:
            for pid in stopped:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)


def children_of(pid: int) -> list[int]:
    """Direct children of `pid`, read from /proc."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                stat = Path(f"/proc/{entry}/stat").read_text()
                if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                    found.append(int(entry))
    return found


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def embedded_postgres(data_dir: Path) -> Iterator[PgServer]:
    port = _free_port()
    settings = Settings(data_dir=data_dir, pg_dsn=f"postgresql://memstream@127.0.0.1:{port}/memstream")
    (data_dir / "logs").mkdir(parents=True, exist_ok=True)
    child = postgres_child(settings, data_dir / "logs")
    dsn = with_passfile(settings.pg_dsn, data_dir)  # the password file exists now
    child.start()
    try:
        admin = psycopg.conninfo.make_conninfo(dsn, dbname="postgres", connect_timeout=2)

        def ready() -> bool:
            with psycopg.connect(admin) as conn:
                conn.execute("SELECT 1")
            return True

        wait_until(ready, 60, "test postgres")
        yield PgServer(dsn, child)
    finally:
        if child.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.proc.pid, signal.SIGCONT)
        child.stop(signal.SIGINT)


@contextlib.asynccontextmanager
async def open_runtime(data_dir: Path, dsn: str) -> AsyncIterator[Runtime]:
    """A worker's Runtime on a migrated test database, its pool open; closed (index, pool) after."""
    await migrate(dsn)
    rt = Runtime.create(Settings(data_dir=data_dir, pg_dsn=dsn))
    await rt.pg.open()
    try:
        yield rt
    finally:
        await rt.index.close()
        await rt.pg.close()
