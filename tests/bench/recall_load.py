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
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import httpx
import numpy as np
import orjson
from aiokafka import AIOKafkaProducer

from schemas import partition_key
from services.embedding import MiniLmEmbedder
from services.textutil import stable_id
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


async def seed(base_url: str, bootstrap: str, memories: int, users: int, budget: float, out: dict[str, Any]) -> None:
    texts = synthetic_texts(500, (4, 14), seed=5)
    base = np.asarray(MiniLmEmbedder().embed(texts), dtype=np.float32)
    rng = np.random.default_rng(3)
    now = datetime.now(UTC).isoformat()
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=20, max_batch_size=1 << 20)
    await producer.start()
    started = time.perf_counter()
    try:
        pending = []
        for k in range(memories):
            i, j = rng.integers(0, len(texts), size=2)
            mixed = base[i] + 0.5 * base[j] + rng.normal(0.0, 0.05, base.shape[1]).astype(np.float32)
            user = f"load-{k % users:04d}"
            value = _candidate(k, user, f"{texts[i]} {texts[j]} (note {k})", mixed / np.linalg.norm(mixed), now)
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
        counts = await scrape(client, "memstream_memories")
    out["seconds"] = time.perf_counter() - started
    out["memories_per_s"] = memories / out["seconds"]
    out["memories_in_postgres"] = int(sum(v for labels, v in counts if labels.get("status") == "active"))


async def load(
    base_url: str, users: int, clients: int, seconds: float, out: dict[str, Any], *, headers: Mapping[str, str]
) -> None:
    """Recall from `clients` concurrent clients for `seconds`; `headers` carry the API key (auth is on)."""
    queries = synthetic_texts(200, (3, 10), seed=9)
    latencies: list[float] = []
    errors = 0
    returned: list[int] = []

    async def client_loop(client: httpx.AsyncClient, rng: random.Random, until: float) -> None:
        nonlocal errors
        while time.perf_counter() < until:
            body = {"tenant_id": TENANT, "user_id": f"load-{rng.randrange(users):04d}", "query": rng.choice(queries)}
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
