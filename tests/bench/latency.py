"""Quick figures: embedder ceiling and turn-to-recall latency on an idle embedded stack.

    python -m tests.bench.latency [--base-url URL --bootstrap HOST:PORT] [--tries 20]

Without --base-url it starts its own embedded stack in a temporary directory.
Prints a table and writes bench-results/latency.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

from services.embedding import MiniLmEmbedder
from tests.stack import embedded_stack, produce, turn

WORDS = (
    "the a I my we you like prefer coffee tea Berlin work project meeting tomorrow dog cat music running book movie "
    "family weekend trip dinner code python garden bike train morning evening friend sister brother plan idea"
).split()


def synthetic_texts(n: int, words: tuple[int, int] = (6, 30), seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(*words))) for _ in range(n)]


def embedder_ceiling(words: tuple[int, int], n: int = 2000) -> float:
    model = MiniLmEmbedder(threads=2)
    texts = synthetic_texts(n, words)
    model.embed(texts[:64])
    started = time.perf_counter()
    model.embed(texts)
    return n / (time.perf_counter() - started)


async def turn_to_recall(base_url: str, bootstrap: str, tries: int) -> list[float]:
    out: list[float] = []
    async with httpx.AsyncClient(base_url=base_url, timeout=30) as client:
        for i in range(tries):
            user = f"lat-{uuid.uuid4().hex[:8]}"
            food = f"{random.choice(['mango', 'lychee', 'papaya', 'guava'])}{i}"
            started = time.perf_counter()
            await produce(bootstrap, [turn("bench", user, "s", 0, f"I really like {food} smoothies.")])
            while True:
                r = await client.post(
                    "/v1/recall", json={"tenant_id": "bench", "user_id": user, "query": "favourite drink"}
                )
                if any(m["type"] == "preference" and food in m["text"] for m in r.json()["memories"]):
                    break
                if time.perf_counter() - started > 60:
                    raise TimeoutError("preference never recalled")
                await asyncio.sleep(0.01)
            out.append(time.perf_counter() - started)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--base-url")
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument("--tries", type=int, default=20)
    args = parser.parse_args()
    results: dict[str, Any] = {
        "embedder_texts_per_s_5_15_words": embedder_ceiling((5, 15)),
        "embedder_texts_per_s_6_30_words": embedder_ceiling((6, 30)),
    }
    if args.base_url:
        samples = asyncio.run(turn_to_recall(args.base_url, args.bootstrap, args.tries))
    else:
        with tempfile.TemporaryDirectory() as tmp, embedded_stack(Path(tmp), port_offset=7) as stack:
            samples = asyncio.run(turn_to_recall(stack.base_url, stack.bootstrap, args.tries))
    results["turn_to_recall_s"] = {
        "median": statistics.median(samples),
        "p90": sorted(samples)[int(0.9 * (len(samples) - 1))],
        "min": min(samples),
        "max": max(samples),
        "n": len(samples),
    }
    out = Path("bench-results")
    out.mkdir(exist_ok=True)
    (out / "latency.json").write_text(json.dumps(results, indent=2))
    for words in ("5_15", "6_30"):
        label = f"embedder (texts/s, 2000 synthetic texts, {words.replace('_', '-')} words)"
        print(f"{label:<60} {results[f'embedder_texts_per_s_{words}_words']:8.1f}")
    for key, value in results["turn_to_recall_s"].items():
        print(f"{'turn -> preference recalled over HTTP, ' + key:<60} {value:8.3f}")


if __name__ == "__main__":
    main()
