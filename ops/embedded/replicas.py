"""Read replicas as supervised processes: `memstream serve --replicas N`, and `memstream up` with MEMSTREAM_READ_REPLICAS.

Each replica is `memstream serve` with MEMSTREAM_REPLICA=i: its own index
(services/api/replica.py) and a listener on the shared port. A replica that
dies is started again after its backoff while the others keep serving.
"""

from __future__ import annotations

import functools
import logging
import os
import signal
import sys
import time
from pathlib import Path

from ops.embedded.supervision import Child, RestartPolicy, stop_on_signals
from services.core.config import Settings

log = logging.getLogger("memstream.replicas")


def replica_child(settings: Settings, number: int, log_dir: Path) -> Child:
    """Replica `number` (1-based): the read service on its own index, sharing the HTTP port."""
    env = {**os.environ, "MEMSTREAM_REPLICA": str(number)}
    return Child(f"replica-{number}", [sys.executable, "-m", "services.cli", "serve"], log_dir, env=env)


class Replicas:
    """N replica processes, each restarted on its own backoff."""

    def __init__(self, settings: Settings, count: int, policy: RestartPolicy, log_dir: Path) -> None:
        self.settings = settings
        self.count = count
        self.policy = policy
        self.log_dir = log_dir
        self.children: dict[int, Child] = {}

    def start(self, number: int) -> None:
        self.children[number] = replica_child(self.settings, number, self.log_dir)
        self.policy.start(self.children[number])

    def start_all(self) -> None:
        for number in range(1, self.count + 1):
            self.start(number)

    def restart_dead(self) -> None:
        for number, child in list(self.children.items()):
            self.policy.restart_when_due(child, functools.partial(self.start, number))

    def stop(self) -> None:
        for child in self.children.values():
            child.stop(signal.SIGTERM)


def run(settings: Settings, count: int) -> int:
    """`memstream serve --replicas N` against running services: supervise N replicas until a signal."""
    log_dir, run_dir = settings.data_dir / "logs", settings.data_dir / "run"
    for folder in (log_dir, run_dir):
        folder.mkdir(parents=True, exist_ok=True)
    replicas = Replicas(settings, count, RestartPolicy(run_dir), log_dir)
    stopping = False

    def stop() -> None:
        nonlocal stopping
        stopping = True

    stop_on_signals(stop)
    replicas.start_all()
    print(f"memstream: {count} read replicas on {settings.http_base_url} (logs in {log_dir})", flush=True)
    try:
        while not stopping:
            time.sleep(0.5)
            if not stopping:
                replicas.restart_dead()
    finally:
        replicas.stop()
    return 0
