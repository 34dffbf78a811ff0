"""A new generation derived from `memory.archive` while the current one keeps serving.

`memstream rebuild generation NAME --from archive`:
1. registers NAME as `building` in public.generations and creates its schema
   (services/core/generations.py) and its own topics, shaped like the base topics
   of topics.yaml;
2. starts a worker process in the generation (`memstream worker` with
   MEMSTREAM_GENERATION=NAME: every stage, with the generation's consumer
   groups, topics, schema and index) that holds its commands stage back.
   Its window reads `memory.archive` from the beginning with a group of its
   own, opening each record with its user's key and skipping forgotten users
   (agents/window/archived.py); it does not archive again;
3. waits until the generation has drained: every stage's consumer group has
   committed the end of its input and the generation's outbox is empty, for
   `settle` seconds in a row (the window's lag on the archive drives the
   progress bar; the total lag is written to the registry as it falls, for
   /metrics); then the same with a worker whose commands stage reads the
   archive too, from its beginning, for the command records the default's
   commands stage sealed there (agents/consolidator/archived.py), so users'
   deletes and corrections meet the memories they name. Nothing is read from
   `memory.commands`, whose records expire: the archive is the one source;
4. stops the worker and marks the generation `ready`, with its figures.

The generation then holds the memory the current code derives from the
archive, in its own schema and index. It stays current because the same
groups go on reading the archive, which the default generation's window
keeps appending to (turns, session ends and applied commands): the embedded stack
runs a worker for every ready or serving generation, and the read service
feeds the serving generation's Qdrant Edge shard itself (a shard has one
owner; services/api/index_follower.py). With a Qdrant server, run
`MEMSTREAM_GENERATION=NAME memstream worker` for it (see docs/operations/rebuild.md).
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from psycopg import AsyncConnection
from psycopg.rows import dict_row

from services.core import generations
from services.core.config import Settings
from services.core.generations import Generation
from services.core.kafka_auth import confluent_config
from services.core.stages import STAGE_INPUTS, group_id
from services.kafka.log_end import group_lag
from services.rebuild.progress import Progress
from services.stores.postgres import generations as generation_registry

log = logging.getLogger("memstream.rebuild")

# The first phase holds the commands back (see `rebuild_generation`).
FIRST_PHASE = tuple(pair for pair in STAGE_INPUTS if pair != ("consolidator", "archive"))


@dataclass
class GenerationTally:
    archived: int = 0  # records of memory.archive the generation's window read
    events: int = 0  # turns the generation holds (forgotten users' records are skipped)
    memories: int = 0  # rows of the generation's memories table at the end
    active: int = 0
    seconds: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "extra"} | self.extra


async def _connect(dsn: str) -> AsyncConnection[dict[str, Any]]:
    return await AsyncConnection.connect(dsn, autocommit=True, row_factory=dict_row)


async def create_topics_of(settings: Settings, gen: Generation) -> list[str]:
    """The generation's own topics, each with its base topic's partitions and retention."""
    from ops.topics import create_topics, load_specs

    own = gen.own_topics()
    specs = [replace(spec, name=own[spec.name]) for spec in load_specs(settings.topics_file) if spec.name in own]
    return await create_topics(settings.kafka_bootstrap, specs, confluent_config(settings))


async def stage_lags(settings: Settings, inputs: tuple[tuple[str, str], ...] = STAGE_INPUTS) -> dict[str, int | None]:
    """Messages of each input (`stage:role`) the generation's stage has not committed yet (None: not measurable)."""
    gen = generations.of(settings)
    return {
        f"{stage}:{role}": await group_lag(settings, group_id(settings.app_id, stage), gen.topic(role))
        for stage, role in inputs
    }


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_worker(settings: Settings, name: str, *, hold_commands: bool = False) -> subprocess.Popen[bytes]:
    """`memstream worker` in the generation, every stage; its log in data_dir/logs/generation-NAME.log."""
    log_dir = settings.data_dir / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "MEMSTREAM_GENERATION": name, "MEMSTREAM_WORKER_METRICS_PORT": str(_free_port())}
    env["MEMSTREAM_HOLD_COMMANDS"] = "true" if hold_commands else "false"
    out = (log_dir / f"generation-{name}.log").open("ab")
    try:
        return subprocess.Popen(
            [sys.executable, "-m", "services.cli", "worker"],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=Path.cwd(),
            start_new_session=True,
        )
    finally:
        out.close()  # the child has its own descriptor


def stop_worker(proc: subprocess.Popen[bytes], timeout: float = 60.0) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


async def _outbox_rows(conn: AsyncConnection[dict[str, Any]]) -> int:
    cur = await conn.execute("SELECT count(*) AS n FROM outbox")
    row = await cur.fetchone()
    return int(row["n"]) if row else 0


async def drain(
    settings: Settings,
    scoped: Settings,
    worker: subprocess.Popen[bytes],
    progress: Progress,
    *,
    settle: float,
    within: float,
    inputs: tuple[tuple[str, str], ...] = STAGE_INPUTS,
    report_every: float = 5.0,
) -> None:
    """Until the generation's stages have committed all of the archive and its outbox is empty, `settle` s running.

    The window's lag on the archive drives the progress bar; the whole lag goes
    into the registry every `report_every` seconds (for /metrics and /readyz).
    """
    name = generations.of(scoped).name
    deadline = time.monotonic() + within
    since: float | None = None
    reported = 0.0
    async with await _connect(scoped.pg_dsn) as conn, await _connect(settings.pg_dsn) as registry:
        while True:
            if worker.poll() is not None:
                raise RuntimeError(f"the generation's worker exited with {worker.returncode} (see its log)")
            lags = await stage_lags(scoped, inputs)
            lag = None if None in lags.values() else sum(v or 0 for v in lags.values())
            window = lags["window:archive"]
            if window is not None:
                total = max(progress.total or 0, progress.done + window)
                progress.advance(max(total - window - progress.done, 0), total=total)
            if time.monotonic() - reported >= report_every:
                reported = time.monotonic()
                log.info("generation %s: lag %s messages (%s)", name, lag, lags)
                await generation_registry.set_state(
                    registry, name, "building", {"lag": lag, "archived": progress.total}
                )
            waiting = await _outbox_rows(conn)
            if lag == 0 and waiting == 0:
                since = since or time.monotonic()
                if time.monotonic() - since >= settle:
                    return
            else:
                since = None
            if time.monotonic() > deadline:
                raise TimeoutError(f"still behind after {within:.0f}s (lag {lag}, outbox {waiting})")
            await asyncio.sleep(1.0)


async def counts(scoped: Settings) -> tuple[int, int, int]:
    """The generation's turns (archived events it accepted), memories, and active memories."""
    async with await _connect(scoped.pg_dsn) as conn:
        cur = await conn.execute(
            "SELECT (SELECT count(*) FROM turns) AS t, count(*) AS n, count(*) FILTER (WHERE status = 'active') AS a"
            " FROM memories"
        )
        row = await cur.fetchone()
    return (int(row["t"]), int(row["n"]), int(row["a"])) if row else (0, 0, 0)


async def rebuild_generation(
    settings: Settings, name: str, progress: Progress, *, settle: float = 5.0, within: float = 3600.0
) -> GenerationTally:
    """Steps 1-4 of the module doc; `settings` are the default generation's (the archive's and the registry's)."""
    gen = Generation(generations.check_name(name))
    scoped = generations.scoped(settings, name)
    started = time.perf_counter()
    tally = GenerationTally()
    async with await _connect(settings.pg_dsn) as conn:
        await generation_registry.begin(conn, name, source="memory.archive")
    await create_topics_of(settings, gen)
    # Two phases: the archive's chat events through every stage with the commands held back, then the archive's
    # commands. A command
    # names memory that existed when it was given; applied before the archive had re-derived that memory, a
    # delete would find nothing and the deleted memory would come back.
    for inputs, hold in ((FIRST_PHASE, True), (STAGE_INPUTS, False)):
        worker = start_worker(settings, name, hold_commands=hold)
        try:
            await drain(settings, scoped, worker, progress, settle=settle, within=within, inputs=inputs)
        except BaseException as exc:
            stop_worker(worker)
            async with await _connect(settings.pg_dsn) as conn:
                await generation_registry.set_state(conn, name, "building", {"error": repr(exc)[:500]})
            raise
        stop_worker(worker)
    progress.finish()
    tally.archived = progress.total or progress.done
    tally.events, tally.memories, tally.active = await counts(scoped)
    tally.seconds = time.perf_counter() - started
    async with await _connect(settings.pg_dsn) as conn:
        await generation_registry.set_state(conn, name, "ready", {**tally.as_dict(), "lag": 0})
    return tally


async def drop_generation(settings: Settings, name: str) -> list[str]:
    """Everything generation `name` holds: its schema and registry row, its topics, its index. What went."""
    gen = Generation(generations.check_name(name))
    async with await _connect(settings.pg_dsn) as conn:
        await generation_registry.drop(conn, name)  # refuses the serving one, before anything is deleted
    removed = [f"schema {gen.schema}"]
    removed += await asyncio.to_thread(_delete_topics, settings, list(gen.own_topics().values()))
    scoped = generations.scoped(settings, name)
    if settings.qdrant_url:
        from services.stores import model_suffix
        from services.stores.qdrant_server_index import server_client

        client = server_client(settings.qdrant_url, settings.qdrant_api_key)
        try:
            collection = scoped.qdrant_collection + model_suffix(settings)
            if await client.collection_exists(collection):
                await client.delete_collection(collection)
                removed.append(f"collection {collection}")
        finally:
            await client.close()
    elif scoped.qdrant_path.exists():
        shutil.rmtree(scoped.qdrant_path.parent)
        removed.append(f"index {scoped.qdrant_path}")
    return removed


def _delete_topics(settings: Settings, names: list[str]) -> list[str]:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": settings.kafka_bootstrap, **confluent_config(settings)})
    existing = set(admin.list_topics(timeout=30).topics)
    doomed = [n for n in names if n in existing]
    deleted = []
    for topic, future in (admin.delete_topics(doomed, operation_timeout=30) if doomed else {}).items():
        try:
            future.result(30)
            deleted.append(f"topic {topic}")
        except Exception as exc:  # the topics are the generation's alone: one left behind is reported, not fatal
            log.warning("topic %s not deleted: %s", topic, exc)
    return deleted
