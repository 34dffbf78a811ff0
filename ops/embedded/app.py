"""memstream's own processes in the embedded stack: the app (read service), the workers, a generation's workers.

With MEMSTREAM_WORKERS=1 the app runs every stage; with N > 1 it runs the
read service and the index stage only (one owner for the Qdrant Edge
shard), and N workers run the other stages, each stage one consumer group
they share. Each ready or serving generation (services/rebuild/generation.py)
gets a worker of its own, so it follows ingest.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

import psycopg

from ops.embedded.supervision import Child, free_port
from services.core.config import Settings
from services.core.stages import INDEX_STAGE, STAGE_NAMES, without

log = logging.getLogger("memstream.stack")


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "services.cli", *args]


def app_argv(settings: Settings) -> list[str] | None:
    """The app process: every stage with one worker, else the index stage alone (the shard's owner).

    With read replicas (settings.read_replicas) the read service runs in them
    (ops/embedded/replicas.py), so the app has no HTTP API: with one worker it
    runs the stages, with more there is no app. Each replica feeds its own
    embedded shard, so the index stage runs only for a Qdrant server.
    """
    if settings.read_replicas == 0:
        return _cli("worker", "--with-api", *(("--stages", INDEX_STAGE) if settings.workers > 1 else ()))
    if settings.workers > 1:
        return None
    return _cli("worker", "--stages", ",".join(worker_stages(settings)))


def worker_stages(settings: Settings) -> tuple[str, ...]:
    """A stage worker's stages: all but the index, unless read replicas share a Qdrant server it must feed."""
    if settings.read_replicas >= 1 and settings.qdrant_url is not None:
        return STAGE_NAMES
    return without(STAGE_NAMES, INDEX_STAGE)


def app_child(settings: Settings, log_dir: Path) -> Child | None:
    argv = app_argv(settings)
    return None if argv is None else Child("app", argv, log_dir, env=dict(os.environ))


def worker_child(settings: Settings, number: int, log_dir: Path) -> Child:
    """Worker `number` (1-based) of `settings.workers`: every stage but the index, metrics on a port of its own."""
    env = {**os.environ, "MEMSTREAM_WORKER_METRICS_PORT": str(settings.worker_metrics_port + number - 1)}
    stages = ",".join(worker_stages(settings))
    return Child(f"worker-{number}", _cli("worker", "--stages", stages), log_dir, env=env)


def generation_worker_child(settings: Settings, name: str, log_dir: Path) -> Child:
    """A worker of generation `name` (see services/rebuild/generation.py): every stage but the index.

    The read service feeds a serving generation's shard itself (one owner per
    shard, services/api/index_follower.py); a generation that is only ready
    gets its index caught up when it is switched to.
    """
    env = {**os.environ, "MEMSTREAM_GENERATION": name, "MEMSTREAM_WORKER_METRICS_PORT": str(free_port())}
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
