"""The embedded stack: broker, Postgres and the app process, supervised.

`memstream up` starts, under `data_dir`:
- the Kafka side (ops/embedded/broker.py): tansu, its local S3 store in
  `kafka/` (MEMSTREAM_KAFKA_STORAGE=memory: in memory) and, with Kafka
  authentication on, the SCRAM gate,
- PostgreSQL with pgvector, data in `pg/` (ops/embedded/postgres.py),
- topics from topics.yaml,
- the app and its workers (ops/embedded/app.py), and a worker for each
  generation that is ready or serving,
- with MEMSTREAM_READ_REPLICAS=N, N read replicas on the HTTP port
  (ops/embedded/replicas.py) instead of the read service in the app.
The app and the workers are restarted after a backoff if they die; the
broker, its store and Postgres at once. SIGINT/SIGTERM stop everything,
children included (ops/embedded/supervision.py).
"""

from __future__ import annotations

import functools
import logging
import signal
import time
from collections.abc import Callable

from ops.embedded.app import app_child, followed_generations, generation_worker_child, worker_child
from ops.embedded.broker import EmbeddedKafka
from ops.embedded.postgres import start_postgres
from ops.embedded.replicas import Replicas
from ops.embedded.supervision import Child, RestartPolicy, host_port, port_busy, stop_on_signals
from services.core.config import Settings
from services.core.errors import StackError

log = logging.getLogger("memstream.stack")


class EmbeddedStack:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.log_dir = settings.data_dir / "logs"
        self.run_dir = settings.data_dir / "run"
        self.children: list[Child] = []  # infrastructure, in start order; stopped in reverse
        self.kafka = EmbeddedKafka(settings, self.log_dir)
        self.own = RestartPolicy(self.run_dir)
        self.app: Child | None = None
        self.workers: dict[int, Child] = {}
        self.replicas = Replicas(settings, settings.read_replicas, self.own, self.log_dir)
        self.generation_workers: dict[str, Child] = {}
        self._generations_checked = 0.0
        self._stopping = False

    def start_infrastructure(self) -> None:
        for folder in (self.log_dir, self.run_dir):
            folder.mkdir(parents=True, exist_ok=True)
        from services.archive.master import ensure_master_key_file

        # The archive's master key (data_dir/master-key, 0600) unless MEMSTREAM_MASTER_KEY is set: made once, kept.
        ensure_master_key_file(self.settings)
        for name, (host, port) in (
            ("Kafka", host_port(self.settings.kafka_bootstrap)),
            ("HTTP", (self.settings.http_host, self.settings.http_port)),
        ):
            if port_busy(host, port):
                raise StackError(f"{name} port {host}:{port} is already in use (another memstream up?)")
        self.kafka.start(self.children)
        # From here on every connection names data_dir/pgpass (created with Postgres).
        self.settings = start_postgres(self.settings, self.log_dir, self.children)
        log.info("topics ready (%d created)", self.kafka.declare_topics())

    def start_app(self) -> None:
        self.app = app_child(self.settings, self.log_dir)
        if self.app is not None:
            self.own.start(self.app)
        if self.replicas.count and not self.replicas.children:
            self.replicas.settings = self.settings
            self.replicas.start_all()

    def start_worker(self, number: int) -> None:
        self.workers[number] = worker_child(self.settings, number, self.log_dir)
        self.own.start(self.workers[number])

    def start_workers(self) -> None:
        """Workers 1..N when MEMSTREAM_WORKERS > 1 (with one, the app runs the stages)."""
        if self.settings.workers > 1:
            for number in range(1, self.settings.workers + 1):
                self.start_worker(number)

    def start_generation_worker(self, name: str) -> None:
        self.generation_workers[name] = generation_worker_child(self.settings, name, self.log_dir)
        self.own.start(self.generation_workers[name])

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

    def _restart_when_due(self, child: Child, start: Callable[[], None]) -> None:
        if not self._stopping:
            self.own.restart_when_due(child, start)

    def _revive(self, child: Child) -> None:
        """Start a dead broker, its store, the gate or Postgres again; the app rides out the gap (its stages retry).

        Postgres recovers from its WAL; the Kafka side is waited for again (EmbeddedKafka.restarted).
        """
        child.restart()
        self.kafka.restarted(child)

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
            if not self._stopping:
                self.replicas.restart_dead()
            for number, worker in list(self.workers.items()):
                self._restart_when_due(worker, functools.partial(self.start_worker, number))
            if not self._stopping:
                self.follow_generations()
        return 0

    def stop(self) -> None:
        self._stopping = True
        self.replicas.stop()
        for worker in [*self.workers.values(), *self.generation_workers.values()]:
            worker.stop(signal.SIGTERM)
        if self.app is not None:
            self.app.stop(signal.SIGTERM)
        for child in reversed(self.children):
            child.stop(signal.SIGINT if child.name == "postgres" else signal.SIGTERM)
        self.children.clear()


def run(settings: Settings) -> int:
    stack = EmbeddedStack(settings)
    stop_on_signals(stack.stop)
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
