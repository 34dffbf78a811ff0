"""A new generation derived from `memory.archive` while the current one keeps serving.

`memstream rebuild generation NAME --from archive`:
1. registers NAME as `building` in public.generations and creates its schema
   (services/generations.py) and its own topics, shaped like the base topics
   of topics.yaml;
2. starts a worker process in the generation (`memstream worker` with
   MEMSTREAM_GENERATION=NAME: every stage, with the generation's consumer
   groups, topics, schema and index; its window does not archive again);
3. replays the archive (services.archive.archived_events: decrypted, in
   per-user order, forgotten users skipped) into the generation's input
   topic `chat.turns.g-NAME`;
4. waits until the generation has drained: every stage's consumer group has
   committed the end of its input and the generation's outbox is empty, for
   `settle` seconds in a row (the lag is written to the registry as it falls,
   for /metrics);
5. stops the worker and marks the generation `ready`, with its figures.

The generation then holds the memory the current code derives from the
archive, in its own schema and index, until `memstream generation switch`
makes it serve. It is not fed afterwards: turns that arrive later reach the
generation that ingests `chat.turns` (the default), and a generation is
rebuilt again to catch up (see the README's "Generations").
"""

from __future__ import annotations

import asyncio
import contextlib
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

from agents.stages import group_id
from schemas import dumps, partition_key
from services import generations
from services.config import Settings
from services.generations import Generation
from services.kafka_auth import aiokafka_kwargs, confluent_config
from services.rebuild.log_end import group_lag
from services.rebuild.progress import Progress
from services.stores.postgres import PgPool

log = logging.getLogger("memstream.rebuild")

# Each stage's input, by the role of its topic: where a generation's lag is measured.
STAGE_INPUTS = {
    "window": "turns",
    "summarizer": "evicted",
    "embedder": "candidates",
    "consolidator": "embedded",
    "qdrant_sink": "changes",
}
SEND_BATCH = 1000


@dataclass
class GenerationTally:
    events: int = 0  # archived events fed to the generation
    forgotten: int = 0  # archived events of forgotten users, skipped
    unreadable: int = 0
    memories: int = 0  # rows of the generation's memories table at the end
    active: int = 0
    feed_seconds: float = 0.0
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


async def pipeline_lag(settings: Settings) -> int | None:
    """Messages the generation's stages have not committed yet, over all of them (None: not yet measurable)."""
    gen = generations.of(settings)
    total = 0
    for stage, role in STAGE_INPUTS.items():
        lag = await group_lag(settings, group_id(settings.app_id, stage), gen.topic(role))
        if lag is None:
            return None
        total += lag
    return total


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_worker(settings: Settings, name: str) -> subprocess.Popen[bytes]:
    """`memstream worker` in the generation, every stage; its log in data_dir/logs/generation-NAME.log."""
    log_dir = settings.data_dir / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "MEMSTREAM_GENERATION": name, "MEMSTREAM_WORKER_METRICS_PORT": str(_free_port())}
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


async def feed(settings: Settings, gen: Generation, progress: Progress, tally: GenerationTally) -> None:
    """Every archived event that can still be opened, into the generation's input topic, in per-user order."""
    from aiokafka import AIOKafkaProducer

    from services.archive import KeyStore, ReplayStats, archived_events

    pool = PgPool(settings.pg_dsn, 2, pool_timeout=30.0)
    await pool.open()
    # acks=all, one request in flight per partition: a user's events keep their order on the generation's input.
    producer = AIOKafkaProducer(
        bootstrap_servers=settings.kafka_bootstrap,
        acks="all",
        linger_ms=20,
        max_batch_size=1 << 20,
        max_request_size=settings.max_message_bytes + 64 * 1024,
        **aiokafka_kwargs(settings),
    )
    await producer.start()
    stats = ReplayStats()
    topic = gen.topic("turns")
    try:
        pending: list[Any] = []
        async for event in archived_events(settings, KeyStore.from_settings(pool, settings), stats=stats):
            pending.append(
                await producer.send(topic, key=partition_key(event.tenant_id, event.user_id), value=dumps(event))
            )
            if len(pending) >= SEND_BATCH:
                await asyncio.gather(*pending)
                progress.advance(len(pending), total=stats.total)
                pending.clear()
        await asyncio.gather(*pending)
        progress.advance(len(pending), total=max(stats.total, progress.done + len(pending)))
    finally:
        await producer.stop()
        await pool.close()
    tally.events, tally.forgotten, tally.unreadable = stats.yielded, stats.forgotten, stats.unreadable


async def _outbox_rows(conn: AsyncConnection[dict[str, Any]]) -> int:
    cur = await conn.execute("SELECT count(*) AS n FROM outbox")
    row = await cur.fetchone()
    return int(row["n"]) if row else 0


async def drain(scoped: Settings, worker: subprocess.Popen[bytes], *, settle: float, within: float) -> None:
    """Until the generation's stages have committed everything and its outbox is empty, `settle` seconds running."""
    deadline = time.monotonic() + within
    since: float | None = None
    async with await _connect(scoped.pg_dsn) as conn:
        while True:
            if worker.poll() is not None:
                raise RuntimeError(f"the generation's worker exited with {worker.returncode} (see its log)")
            lag = await pipeline_lag(scoped)
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


async def report_lag(settings: Settings, scoped: Settings, name: str, progress: Progress, every: float = 5.0) -> None:
    """The generation's lag into its registry row, every few seconds until cancelled: /metrics shows it from there."""
    async with await _connect(settings.pg_dsn) as registry:
        while True:
            await asyncio.sleep(every)
            try:
                lag = await pipeline_lag(scoped)
                log.info("generation %s: %d archived events fed, lag %s messages", name, progress.done, lag)
                await generations.set_state(registry, name, "building", {"lag": lag, "fed": progress.done})
            except Exception as exc:  # a figure for dashboards: a missed tick must not stop the rebuild
                log.warning("generation %s: lag not measured this time (%s)", name, exc)


async def counts(scoped: Settings) -> tuple[int, int]:
    async with await _connect(scoped.pg_dsn) as conn:
        cur = await conn.execute("SELECT count(*) AS n, count(*) FILTER (WHERE status = 'active') AS a FROM memories")
        row = await cur.fetchone()
    return (int(row["n"]), int(row["a"])) if row else (0, 0)


async def _stop(task: asyncio.Task[None]) -> None:
    """Cancel and wait, so a registry update it had in flight cannot land after the final one."""
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def rebuild_generation(
    settings: Settings, name: str, progress: Progress, *, settle: float = 5.0, within: float = 3600.0
) -> GenerationTally:
    """Steps 1-5 of the module doc; `settings` are the default generation's (the archive's and the registry's)."""
    gen = Generation(generations.check_name(name))
    scoped = generations.scoped(settings, name)
    started = time.perf_counter()
    tally = GenerationTally()
    async with await _connect(settings.pg_dsn) as conn:
        await generations.begin(conn, name, source="memory.archive")
    await create_topics_of(settings, gen)
    worker = start_worker(settings, name)
    reporter = asyncio.create_task(report_lag(settings, scoped, name, progress))
    try:
        await feed(settings, gen, progress, tally)
        tally.feed_seconds = time.perf_counter() - started
        progress.finish()
        await drain(scoped, worker, settle=settle, within=within)
    except BaseException as exc:
        await _stop(reporter)
        stop_worker(worker)
        async with await _connect(settings.pg_dsn) as conn:
            await generations.set_state(conn, name, "building", {"error": repr(exc)[:500]})
        raise
    await _stop(reporter)
    stop_worker(worker)
    tally.memories, tally.active = await counts(scoped)
    tally.seconds = time.perf_counter() - started
    async with await _connect(settings.pg_dsn) as conn:
        await generations.set_state(conn, name, "ready", {**tally.as_dict(), "lag": 0})
    return tally


async def drop_generation(settings: Settings, name: str) -> list[str]:
    """Everything generation `name` holds: its schema and registry row, its topics, its index. What went."""
    gen = Generation(generations.check_name(name))
    async with await _connect(settings.pg_dsn) as conn:
        await generations.drop(conn, name)  # refuses the serving one, before anything is deleted
    removed = [f"schema {gen.schema}"]
    removed += await asyncio.to_thread(_delete_topics, settings, list(gen.own_topics().values()))
    scoped = generations.scoped(settings, name)
    if settings.qdrant_url:
        from qdrant_client import AsyncQdrantClient

        from services.stores import model_suffix

        client = AsyncQdrantClient(url=settings.qdrant_url)
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
