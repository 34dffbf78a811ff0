"""`make bench`: every speed figure in one run, on one embedded stack.

    python -m tests.bench.run [--quick]

Prints a table and writes bench-results/bench.json. Each stage has a time
budget; a stage that runs out prints what it measured and is marked
`timed_out`, and the run goes on.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from services.core.config import Settings
from services.embedding import MiniLmEmbedder
from tests.bench import auth_check, pipeline, recall_load, scaling, tracing_cost
from tests.bench import rebuild as rebuild_bench
from tests.bench.corpus import conversations
from tests.bench.probe import peak_rss_mib, scrape
from tests.stack import Stack, embedded_stack, stack_settings

RESULTS = Path("bench-results")


@dataclass(frozen=True)
class Plan:
    turns: int = 5_000
    users: int = 50
    idle_tries: int = 20
    fresh_rate: float = 20.0
    fresh_seconds: float = 60.0
    memories: int = 100_000
    load_users: int = 500
    clients: int = 8
    load_seconds: float = 30.0
    # Optional stage (--scaling): one replay on a stack with 1, then 2 worker processes.
    scaling_turns: int = 2_000
    scaling_users: int = 24

    @classmethod
    def quick(cls) -> Plan:
        return cls(
            turns=500, users=10, idle_tries=5, fresh_seconds=10, memories=5_000, load_seconds=5, scaling_turns=300
        )


async def _stage(
    results: dict[str, Any], name: str, budget: float, run: Callable[[dict[str, Any]], Awaitable[None]]
) -> None:
    out: dict[str, Any] = {}
    results[name] = out
    started = time.perf_counter()
    try:
        await asyncio.wait_for(run(out), budget)
    except TimeoutError:
        out["timed_out"] = True
    except Exception as exc:  # a broken stage must not hide the others' figures
        out["error"] = repr(exc)
    out["stage_seconds"] = round(time.perf_counter() - started, 1)
    print(f"  {name}: {out}", flush=True)


def embedder_ceiling(corpus: list[dict[str, Any]], n: int = 2_000) -> dict[str, Any]:
    """The bare model, in this process, on the benchmark's own turn texts."""
    texts = [e["content"] for e in corpus if "content" in e][:n]
    return bare_rate(MiniLmEmbedder(), texts)


def bare_rate(model: MiniLmEmbedder, texts: list[str]) -> dict[str, Any]:
    model.embed(texts[:64])  # warm-up
    started = time.perf_counter()
    model.embed(texts)
    return {"texts": len(texts), "texts_per_s": len(texts) / (time.perf_counter() - started)}


def pipeline_model_rate(settings: Settings, texts: list[str]) -> dict[str, Any]:
    """The bare model as the pipeline builds it (services/runtime.py), on the texts the pipeline embedded.

    Timed after the stack has stopped, on a quiet machine: the ceiling the
    embedder stage could reach with every core to itself.
    """
    model = MiniLmEmbedder(None, settings.embed_threads, 256, settings.embed_batch_size, settings.embed_quantized)
    return {**bare_rate(model, texts), "model": model.name} if texts else {}


async def on_stack(stack: Stack, plan: Plan, corpus: list[dict[str, Any]], results: dict[str, Any]) -> list[str]:
    """Every stage on one stack; returns the texts the throughput stage embedded, for the bare model after it."""
    url, kafka, headers = stack.base_url, stack.bootstrap, stack.headers
    await _stage(
        results,
        "turn_to_recall_idle",
        120,
        lambda o: pipeline.turn_to_recall(url, kafka, plan.idle_tries, o, headers=headers),
    )
    embedded_before = await _embedder_totals(url)
    await _stage(results, "throughput", 300, lambda o: pipeline.replay(stack_settings(stack), corpus, o))
    embedded_after = await _embedder_totals(url)
    results["pipeline_embedded"] = {k: embedded_after[k] - embedded_before[k] for k in embedded_after}
    texts = await pipeline.embedded_texts(stack_settings(stack), {e["user_id"] for e in corpus})
    # Offered at min(20, 0.4 x the throughput just measured): the goal is about a pipeline under half load.
    measured = results["throughput"].get("turns_per_s")
    rate = min(plan.fresh_rate, 0.4 * measured) if measured else plan.fresh_rate
    results["freshness_rate"] = {"offered_turns_per_s": round(rate, 1)}
    await _stage(
        results,
        "freshness",
        plan.fresh_seconds + 90,
        lambda o: pipeline.freshness(stack_settings(stack), url, rate, plan.fresh_seconds, o, headers=headers),
    )
    # The recall figures need every seeded memory stored and indexed (and the pipeline quiet): a seed still
    # draining would share the cores with the recall load. 100,000 memories took ~250 s at ~390/s.
    await _stage(
        results,
        "seed",
        930,
        lambda o: recall_load.seed(url, kafka, stack_settings(stack).pg_dsn, plan.memories, plan.load_users, 900, o),
    )
    # Single-client and concurrent recall, repeated and fresh queries, against one bare query embedding.
    await _stage(
        results,
        "recall_load",
        2.5 * plan.load_seconds + 90,
        lambda o: recall_load.recall_figures(url, plan.load_users, plan.clients, plan.load_seconds, o, headers=headers),
    )
    # Freshness while `clients` clients recall without pause over the seeded store (read path, no marks).
    await _stage(
        results,
        "freshness_under_load",
        plan.fresh_seconds + 120,
        lambda o: freshness_under_load(stack, plan, rate, o),
    )
    # Rebuild rates over the seeded memories: the index from Postgres, the store from memory.changes.
    await _stage(results, "rebuild_index", 600, lambda o: rebuild_bench.index(stack_settings(stack), o))
    await _stage(results, "rebuild_store", 900, lambda o: rebuild_bench.store(stack_settings(stack), o))
    await _stage(results, "auth_check", 120, lambda o: auth_check.measure(stack_settings(stack), stack.api_key, o))
    results["auth"] = auth_summary(results)
    results["peak_rss_mib"] = {"app (worker + read service, one process)": peak_rss_mib(stack.app_pid())}
    return texts


async def freshness_under_load(stack: Stack, plan: Plan, rate: float, out: dict[str, Any]) -> None:
    loaded: dict[str, Any] = {}
    await asyncio.gather(
        recall_load.read_load(
            stack.base_url, plan.load_users, plan.clients, plan.fresh_seconds + 5, loaded, stack.headers
        ),
        pipeline.freshness(stack_settings(stack), stack.base_url, rate, plan.fresh_seconds, out, headers=stack.headers),
    )
    out.update({f"recall_{k}_ms": loaded[k] * 1000 for k in ("p50", "p95") if k in loaded})
    out["recall_requests_per_s"] = loaded.get("requests_per_s")


async def _embedder_totals(url: str) -> dict[str, float]:
    """Texts the stack's model has embedded so far (cache misses), and the seconds it spent on them."""
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        return {
            "texts": sum(v for _, v in await scrape(client, "memstream_embedder_texts_total")),
            "busy": sum(v for _, v in await scrape(client, "memstream_embedder_busy_seconds_total")),
        }


def ingest_efficiency(
    embedded: dict[str, float], throughput: dict[str, Any], embedder: dict[str, Any]
) -> dict[str, Any]:
    """Texts the pipeline embedded per second of the replay, against the bare model on the same texts.

    A user turn embeds more than one text (its exchange, its context), so
    turns/s against texts/s understates what the pipeline keeps of the model;
    and those texts are longer than a turn, so the bare rate is timed on them
    (`embedder`: pipeline_model_rate), with the model the pipeline runs.
    The model's busy share of the replay, and its rate while busy, say where
    the rest went: a model slower while busy shares the cores; one idle part
    of the time waits for the stages around it.
    """
    seconds, bare, texts = throughput.get("seconds"), embedder.get("texts_per_s"), embedded.get("texts")
    if not seconds or not bare or not texts:
        return {}
    per_s = texts / seconds
    return {
        "texts_embedded": int(texts),
        "texts_per_turn": texts / max(throughput.get("covered") or 1, 1),
        "pipeline_texts_per_s": per_s,
        "bare_texts": embedder.get("texts"),
        "bare_texts_per_s": bare,
        "ratio": per_s / bare,
        "model_busy_share": embedded["busy"] / seconds,
        "texts_per_busy_s": texts / embedded["busy"] if embedded["busy"] else None,
    }


def auth_summary(results: dict[str, Any]) -> dict[str, Any]:
    """Recall with auth on (measured under load) and off (the same minus the key check, measured in process)."""
    check = results.get("auth_check", {})
    p50 = results.get("recall_load", {}).get("p50")
    cost = check.get("check_cost_us")
    if p50 is None or cost is None:
        return {}
    return {
        "recall_p50_ms_auth_on": p50 * 1000,
        "recall_p50_ms_auth_off_estimated": p50 * 1000 - cost / 1000,
        "key_check_us_cached": cost,
        "key_check_us_uncached_p50": check["uncached_p50_us"] - check["off_p50_us"],
        "key_check_share_of_recall_p50": cost / 1e6 / p50,
    }


def _fmt(value: Any) -> str:
    return f"{value:,.3f}" if isinstance(value, float) else str(value)


def table(results: dict[str, Any]) -> str:
    ceiling = results.get("embedder", {}).get("texts_per_s")
    tput = results.get("throughput", {}).get("turns_per_s")
    if ceiling and tput:
        results["throughput"]["ratio_to_embedder_ceiling"] = tput / ceiling
    lines = [f"{'figure':<62} {'value':>14}", "-" * 77]
    for stage, figures in results.items():
        for key, value in figures.items():
            if key != "stage_seconds":
                lines.append(f"{stage + ' / ' + key:<62} {_fmt(value):>14}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="small sizes, to check the bench itself")
    parser.add_argument(
        "--scaling",
        action="store_true",
        default=os.environ.get("BENCH_SCALING") == "1",
        help="also compare 1 vs 2 worker processes on two more stacks, ~5 min (or BENCH_SCALING=1 make bench)",
    )
    args = parser.parse_args()
    plan = Plan.quick() if args.quick else Plan()
    corpus = conversations(plan.turns, plan.users)
    results: dict[str, Any] = {"plan": plan.__dict__, "embedder": embedder_ceiling(corpus)}
    print(f"  embedder: {results['embedder']}", flush=True)
    fast_gauges = {"MEMSTREAM_LAG_REFRESH_SECONDS": "0.5", "MEMSTREAM_GAUGE_REFRESH_SECONDS": "2"}
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp, embedded_stack(Path(tmp), extra_env=fast_gauges) as stack:
        # What `make up` runs unless MEMSTREAM_KAFKA_STORAGE says otherwise: the headline is the default (s3).
        storage = stack_settings(stack).kafka_storage
        results["stack"] = {"start_seconds": time.perf_counter() - started, "kafka_storage": storage}
        texts = asyncio.run(on_stack(stack, plan, corpus, results))
        settings = stack_settings(stack)
    results["embedder_same_texts"] = pipeline_model_rate(settings, texts)
    print(f"  embedder_same_texts: {results['embedder_same_texts']}", flush=True)
    results["ingest_efficiency"] = ingest_efficiency(
        results.pop("pipeline_embedded", {}), results.get("throughput", {}), results["embedder_same_texts"]
    )
    if args.scaling:
        started = time.perf_counter()
        results["worker_scaling"] = scaling.compare(conversations(plan.scaling_turns, plan.scaling_users))
        results["worker_scaling"]["stage_seconds"] = round(time.perf_counter() - started, 1)
        print(f"  worker_scaling: {results['worker_scaling']}", flush=True)
    # Traces off (the default) and on, per stage batch, set against the throughput just measured.
    results["tracing_cost"] = tracing_cost.measure(results.get("throughput", {}).get("turns_per_s"))
    print(f"  tracing_cost: {results['tracing_cost']}", flush=True)
    RESULTS.mkdir(exist_ok=True)
    text = table(results)
    (RESULTS / "bench.json").write_text(json.dumps(results, indent=2, default=str))
    print(text)


if __name__ == "__main__":
    main()
