"""Recall under load: seed a large store through the real write path, then query concurrently.

Seeding skips the embedder on purpose: 100,000 texts would take it minutes.
Candidates go straight to `memory.embedded` with vectors built from a small
set of real MiniLM embeddings (mixtures plus noise), so the consolidator,
Postgres and the Qdrant sink do all of their usual work.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from typing import Any

import httpx
import numpy as np
import orjson
import psycopg
from aiokafka import AIOKafkaProducer

from schemas import partition_key
from services.core.textutil import stable_id
from services.embedding import MiniLmEmbedder
from tests.bench.corpus import synthetic_texts
from tests.bench.probe import percentiles, scrape, wait_drained

TENANT = "load"


def _candidate(k: int, user: str, text: str, vector: np.ndarray[Any, Any], now: str) -> bytes:
    candidate = {
        "tenant_id": TENANT,
        "user_id": user,
        "candidate_id": stable_id("bench-seed", str(k)),
        "type": "exchange",
        "text": text,
        "importance": 0.5,
        "confidence": 1.0,
        "observed_at": now,
        "source": {"session_id": f"seed-{k % 97}", "event_ids": [f"seed-{k}"], "metadata": []},
        "extractor": "bench-seed",
    }
    envelope = {"tenant_id": TENANT, "user_id": user, "candidate": candidate, "vector": vector, "model": "seed"}
    return orjson.dumps(envelope, option=orjson.OPT_SERIALIZE_NUMPY)


def seed_candidates(memories: int, users: int) -> Iterator[tuple[str, bytes]]:
    """(user, `memory.embedded` value) for each seeded memory: vectors are mixtures of 500 real MiniLM
    embeddings plus noise, users taken in turn."""
    texts = synthetic_texts(500, (4, 14), seed=5)
    base = np.asarray(MiniLmEmbedder().embed(texts), dtype=np.float32)
    rng = np.random.default_rng(3)
    now = datetime.now(UTC).isoformat()
    for k in range(memories):
        i, j = rng.integers(0, len(texts), size=2)
        mixed = base[i] + 0.5 * base[j] + rng.normal(0.0, 0.05, base.shape[1]).astype(np.float32)
        user = f"load-{k % users:04d}"
        yield user, _candidate(k, user, f"{texts[i]} {texts[j]} (note {k})", mixed / np.linalg.norm(mixed), now)


async def seed(
    base_url: str, bootstrap: str, pg_dsn: str, memories: int, users: int, budget: float, out: dict[str, Any]
) -> None:
    """Seed `memories` through the pipeline, wait until it has stored and indexed them, then VACUUM ANALYZE.

    The vacuum is what any bulk load ends with: without it autovacuum starts
    on the 100,000 new rows while recall is measured, and the recall figures
    would measure it too (8-client p95 76.8 ms right after the seed, 60.3 ms
    90 s later, in one scratch run).
    """
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=20, max_batch_size=1 << 20)
    await producer.start()
    started = time.perf_counter()
    try:
        pending = []
        for user, value in seed_candidates(memories, users):
            pending.append(await producer.send("memory.embedded", key=partition_key(TENANT, user), value=value))
            if len(pending) >= 5000:
                await asyncio.gather(*pending)
                pending.clear()
        await asyncio.gather(*pending)
    finally:
        await producer.stop()
    out["produce_seconds"] = time.perf_counter() - started
    async with httpx.AsyncClient(base_url=base_url, timeout=30) as client:
        out["drained"] = await wait_drained(client, budget)
    out["seconds"] = time.perf_counter() - started
    out["memories_per_s"] = memories / out["seconds"]
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        # Counted in Postgres: the memory-count gauge is refreshed on a timer and can be a round behind.
        cursor = await conn.execute(
            "SELECT count(*) FROM memories WHERE tenant_id = %s AND status = 'active'", (TENANT,)
        )
        row = await cursor.fetchone()
        out["memories_in_postgres"] = int(row[0]) if row else 0
        vacuum_started = time.perf_counter()
        await conn.execute("VACUUM (ANALYZE) memories")
    out["vacuum_analyze_seconds"] = time.perf_counter() - vacuum_started


async def read_load(
    base_url: str, users: int, clients: int, seconds: float, out: dict[str, Any], headers: Mapping[str, str]
) -> None:
    """`clients` recalling without pause and without access marks, as the load beside another measurement."""
    await load(base_url, users, clients, seconds, out, headers=headers, record_access=False)


async def load(
    base_url: str,
    users: int,
    clients: int,
    seconds: float,
    out: dict[str, Any],
    *,
    headers: Mapping[str, str],
    fresh: bool = False,
    record_access: bool = True,
) -> None:
    """Recall from `clients` concurrent clients for `seconds`; `headers` carry the API key (auth is on).

    Queries come from a pool of 200, as an assistant's repeat; `fresh` makes
    every query text new (a numbered suffix), so none is in the query cache
    and each recall pays the model. `record_access=False` asks like an
    evaluation does: no access marks, so no work for the pipeline behind.
    """
    queries = repeated_queries()
    latencies: list[float] = []
    errors = 0
    returned: list[int] = []
    sent = 0

    async def client_loop(client: httpx.AsyncClient, rng: random.Random, until: float) -> None:
        nonlocal errors, sent
        while time.perf_counter() < until:
            sent += 1
            query = f"{rng.choice(queries)} ({clients}-{sent})" if fresh else rng.choice(queries)
            user = f"load-{rng.randrange(users):04d}"
            body = {"tenant_id": TENANT, "user_id": user, "query": query, "record_access": record_access}
            started = time.perf_counter()
            r = await client.post("/v1/recall", json=body)
            latencies.append(time.perf_counter() - started)
            if r.status_code != 200:
                errors += 1
            else:
                returned.append(len(r.json()["memories"]))

    limits = httpx.Limits(max_connections=clients)
    async with httpx.AsyncClient(base_url=base_url, timeout=30, limits=limits, headers=dict(headers)) as client:
        until = time.perf_counter() + seconds
        await asyncio.gather(*(client_loop(client, random.Random(c), until) for c in range(clients)))
    out.update(
        clients=clients,
        requests=len(latencies),
        errors=errors,
        requests_per_s=len(latencies) / seconds,
        mean_memories_returned=sum(returned) / max(len(returned), 1),
        **percentiles(latencies),
    )


def repeated_queries() -> list[str]:
    """The pool of 200 queries the repeated-query runs draw from."""
    return synthetic_texts(200, (3, 10), seed=9)


async def warm_query_cache(base_url: str, users: int, connections: int, headers: Mapping[str, str]) -> float:
    """Every query of the pool asked once on each of `connections` connections; the seconds it took.

    The repeated-query runs measure recall when the query cache answers. Unwarmed, the single-client
    run's first sight of each of the 200 queries paid the model (~13 % of its requests), so its p95 was
    a miss's latency. The cache is per process: with read replicas a connection stays on one replica,
    so many connections reach every replica's cache.
    """
    queries = repeated_queries()
    started = time.perf_counter()

    async def one_connection(c: int) -> None:
        rng = random.Random(c)
        async with httpx.AsyncClient(base_url=base_url, timeout=30, headers=dict(headers)) as client:
            for query in rng.sample(queries, len(queries)):
                body = {"tenant_id": TENANT, "user_id": f"load-{rng.randrange(users):04d}", "query": query}
                (await client.post("/v1/recall", json={**body, "record_access": False})).raise_for_status()

    await asyncio.gather(*(one_connection(c) for c in range(connections)))
    return time.perf_counter() - started


def bare_query_embedding(n: int = 200, threads: int = 2) -> dict[str, float]:
    """One query at a time through the bare model, as the read service's model runs (same threads, no cache):
    the floor a recall that misses the query cache cannot go below."""
    model = MiniLmEmbedder(threads=threads)
    queries = synthetic_texts(n, (3, 10), seed=9)
    model.embed(queries[:8])
    times = []
    for query in queries:
        started = time.perf_counter()
        model.embed([query])
        times.append(time.perf_counter() - started)
    return {f"{k}_ms": v * 1000 for k, v in percentiles(times, (50, 95)).items()}


async def recall_figures(
    base_url: str, users: int, clients: int, seconds: float, out: dict[str, Any], *, headers: Mapping[str, str]
) -> None:
    """The recall figures of `make bench`, each run's p50/p95/p99 also as a ratio to one bare query embedding
    (measured first, in this process, while the stack is idle).

    The read path alone first, without access marks: 1 and `clients` clients over repeated queries (the
    query cache warmed first: `warm_query_cache`), then over fresh ones (every query pays the model). Last, the
    run the stage always made: `clients` clients, repeated queries, access marks on (each recall sends one
    command, and the consolidator publishes one memory.changes event per returned memory); its p50/p95/p99
    stay under the stage's plain keys, and the pipeline's backlog right after it is `marks_backlog_messages`.
    Marks-off runs go first so no run pays for an earlier run's marks.
    """
    bare = await asyncio.to_thread(bare_query_embedding)
    out.update({f"bare_query_embed_{k}": v for k, v in bare.items()})
    runs = [
        ("single", 1, seconds / 3, False, False),
        ("concurrent", clients, seconds * 2 / 3, False, False),
        ("single_fresh", 1, seconds / 4, True, False),
        ("concurrent_fresh", clients, seconds / 3, True, False),
        ("concurrent_marks", clients, seconds, False, True),
    ]
    out["query_cache_warm_seconds"] = await warm_query_cache(base_url, users, 2 * clients, headers)
    async with httpx.AsyncClient(base_url=base_url, timeout=30, headers=dict(headers)) as client:
        before = await _query_cache(client)
    for name, n, length, fresh, marks in runs:
        run: dict[str, Any] = {}
        await load(base_url, users, n, length, run, headers=headers, fresh=fresh, record_access=marks)
        if name == "concurrent_marks":
            out.update(run)
        for key in ("p50", "p95", "p99"):
            if key in run:
                out[f"{name}_{key}_ms"] = run[key] * 1000
                out[f"{name}_{key}_to_bare_embed"] = run[key] * 1000 / bare["p50_ms"]
        out[f"{name}_requests_per_s"] = run["requests_per_s"]
        out[f"{name}_errors"] = run["errors"]
    async with httpx.AsyncClient(base_url=base_url, timeout=30, headers=dict(headers)) as client:
        after = await _query_cache(client)
        out["marks_backlog_messages"] = sum(v for _, v in await scrape(client, "memstream_consumer_lag_messages"))
    looked = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}
    out["query_cache_hit_ratio"] = looked.get("hit", 0.0) / max(sum(looked.values()), 1.0)


async def _query_cache(client: httpx.AsyncClient) -> dict[str, float]:
    return {labels["result"]: v for labels, v in await scrape(client, "memstream_query_embedding_lookups_total")}
