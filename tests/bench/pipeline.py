"""Speed of the write path: idle turn-to-recall, bulk throughput, freshness under steady load.

Each function fills `out` as it goes, so a caller that gives up on a slow
stage still has the figures measured so far.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import re
import time
import uuid
from collections.abc import Mapping
from typing import Any

import httpx
import orjson

from agents.embedder.agent import texts_to_embed
from schemas import MemoryCandidate, codec
from services.core import topics
from services.core.config import Settings
from services.kafka.log_end import read_to_end
from services.kafka.producer import TurnProducer
from tests.bench.corpus import SUBJECTS, sentence, turn_ids
from tests.bench.probe import ChangeWatcher, percentiles
from tests.stack import turn

TENANT = "bench"


async def _recalled(client: httpx.AsyncClient, user: str, query: str, needle: str) -> bool:
    r = await client.post("/v1/recall", json={"tenant_id": TENANT, "user_id": user, "query": query})
    return r.status_code == 200 and any(needle in m["text"] for m in r.json()["memories"])


async def _until_recalled(
    client: httpx.AsyncClient, user: str, query: str, needle: str, started: float, poll: float = 0.05
) -> float | None:
    """Seconds from `started` until `needle` is recalled; None if not within a minute."""
    while time.perf_counter() - started < 60.0:
        if await _recalled(client, user, query, needle):
            return time.perf_counter() - started
        await asyncio.sleep(poll)
    return None


async def turn_to_recall(
    base_url: str, bootstrap: str, tries: int, out: dict[str, Any], *, headers: Mapping[str, str]
) -> None:
    """One preference at a time on an otherwise idle stack; `headers` carry the API key."""
    samples: list[float] = []
    async with (
        httpx.AsyncClient(base_url=base_url, timeout=30, headers=dict(headers)) as client,
        TurnProducer(bootstrap) as producer,
    ):
        for i in range(tries):
            user, food = f"idle-{uuid.uuid4().hex[:8]}", f"{random.choice(SUBJECTS)}{i}"
            started = time.perf_counter()
            await producer.send_raw([orjson.dumps(turn(TENANT, user, "s", 0, f"I really like {food} smoothies."))])
            took = await _until_recalled(client, user, "favourite drink", food, started)
            if took is not None:
                samples.append(took)
            out.update(n=len(samples), misses=i + 1 - len(samples), **percentiles(samples, (50, 90)))
    if samples:
        out.update(min=min(samples), max=max(samples))


async def replay(settings: Settings, events: list[dict[str, Any]], out: dict[str, Any], stall: float = 60.0) -> None:
    """Produce `events` as fast as the producer goes; return when every turn is in some change's provenance.

    Every turn ends up in at least one memory (its exchange memory or an
    episode), so full coverage means the write path has finished with them.
    If no change arrives for `stall` seconds (turns in the DLQ, a dead
    stage), it gives up and reports `stalled` with the coverage reached.
    """
    expected = turn_ids(events)
    covered: set[str] = set()
    last_change = 0.0
    all_covered = asyncio.Event()

    def on_change(change: dict[str, Any], arrived: float) -> None:
        nonlocal last_change
        last_change = arrived
        covered.update(expected.intersection(change["record"]["source"]["event_ids"]))
        if len(covered) == len(expected):
            all_covered.set()

    out.update(turns=len(expected), users=len({e["user_id"] for e in events}))
    async with ChangeWatcher(settings, on_change), TurnProducer(settings.kafka_bootstrap) as producer:
        started = time.perf_counter()
        try:
            await producer.send_raw(orjson.dumps(e) for e in events)
            out["produce_seconds"] = time.perf_counter() - started
            while not all_covered.is_set():
                if time.perf_counter() - max(last_change, started + out["produce_seconds"]) > stall:
                    out["stalled"] = True
                    return
                await asyncio.sleep(0.2)
            # Stragglers (reinforcements, later episodes) still count as its work.
            seen = last_change
            await asyncio.sleep(2.0)
            while last_change != seen:
                seen = last_change
                await asyncio.sleep(2.0)
        finally:
            elapsed = (last_change or time.perf_counter()) - started
            out.update(covered=len(covered), seconds=elapsed, turns_per_s=len(covered) / elapsed)


async def freshness(
    settings: Settings,
    base_url: str,
    rate: float,
    seconds: float,
    out: dict[str, Any],
    probe_every: int = 4,
    users: int = 50,
    *,
    headers: Mapping[str, str],
    timeline: list[dict[str, Any]] | None = None,
) -> None:
    """Steady `rate` user turns/s; every `probe_every`-th timed from produce until recallable over HTTP.

    A probe starts polling recall only once memory.changes carries its turn:
    polling from the first moment made the probes a read load of their own
    that grew with the lag it measured (at 20 turns/s, a third of the app's
    CPU went to the probes' recalls and freshness ran away to 12 s). The
    figure is still produce -> recalled over HTTP; the change only says when
    asking is worth it. `timeline`, if given, gets one entry per probe: when
    its token, when it was produced (`at`, seconds into the stage; `produced_at`, epoch
    seconds), when its change arrived and when it was recalled (seconds after
    produce; absent if it never was).
    """
    run = uuid.uuid4().hex[:6]
    rng = random.Random(13)
    samples: list[float] = []
    misses = 0
    written: dict[str, asyncio.Event] = {}
    arrived: dict[str, float] = {}

    def on_change(change: dict[str, Any], arrival: float) -> None:
        text = str(change.get("record", {}).get("text", ""))
        for token in re.findall(rf"zq{run}x\d+", text):
            arrived.setdefault(token, arrival)
            written.setdefault(token, asyncio.Event()).set()

    async def probe(user: str, text: str, token: str, started: float) -> None:
        nonlocal misses
        took: float | None = None
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(written.setdefault(token, asyncio.Event()).wait(), 60.0)
            took = await _until_recalled(client, user, text, token, started, poll=0.05)
        if took is None:
            misses += 1
        else:
            samples.append(took)
        out.update(n=len(samples), misses=misses, **percentiles(samples))
        if timeline is not None:
            entry: dict[str, Any] = {"token": token, "at": started - t0}
            entry["produced_at"] = time.time() - (time.perf_counter() - started)
            if token in arrived:
                entry["change"] = arrived[token] - started
            if took is not None:
                entry["recalled"] = took
            timeline.append(entry)

    limits = httpx.Limits(max_connections=64)
    async with (
        httpx.AsyncClient(base_url=base_url, timeout=30, limits=limits, headers=dict(headers)) as client,
        TurnProducer(settings.kafka_bootstrap) as producer,
        ChangeWatcher(settings, on_change),
    ):
        # A producer's first send connects, reads metadata and gets a producer id (about 1 s on this broker).
        # A chat service's producer lives on, so that once-only cost is not the pipeline's freshness.
        await producer.send_raw([orjson.dumps(turn(TENANT, f"warm-{run}", "warm", 0, "Warming up the producer."))])
        probes: list[asyncio.Task[None]] = []
        t0 = time.perf_counter()
        count = int(rate * seconds)
        for i in range(count):
            await asyncio.sleep(max(0.0, t0 + i / rate - time.perf_counter()))
            user, token = f"fresh-{i % users}-{run}", f"zq{run}x{i}"
            # Distinct sentences, found by their own text: this measures freshness, not ranking.
            text = f"{sentence(rng, 6, 20)} Code word {token}."
            started = time.perf_counter()
            await producer.send_raw([orjson.dumps(turn(TENANT, user, f"f{i % users}", i // users, text))])
            if i % probe_every == 0:
                probes.append(asyncio.create_task(probe(user, text, token, started)))
        out["offered_turns_per_s"] = count / (time.perf_counter() - t0)
        await asyncio.gather(*probes)


async def embedded_texts(settings: Settings, users: set[str]) -> list[str]:
    """The texts the embedder stage was given for `users`' turns, each once, as its cache would embed them.

    Read back from memory.candidates with the stage's own text function, so a
    bare model can be timed on exactly what the pipeline embedded.
    """
    seen: dict[str, None] = {}
    async for batch in read_to_end(settings, topics.CANDIDATES):
        for message in batch:
            if message.value is not None:
                candidate = codec.loads(MemoryCandidate, message.value)
                if candidate.user_id in users:
                    seen.update(dict.fromkeys(texts_to_embed([candidate])))
    return list(seen)
