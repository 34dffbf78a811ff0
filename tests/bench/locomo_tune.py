"""Tuning recall on the LoCoMo dev set without replaying it for every setting.

    python -m tests.bench.locomo_tune ingest [--data PATH] [--rows FILE]
    python -m tests.bench.locomo_tune grid   [--data PATH] [--rows FILE] [--only NAME ...]

`ingest` replays the dev set through the real pipeline (the bench's own
embedded stack, on free ports, like `make bench-locomo`) and saves every
active memory it made, with its embedding and context embedding, as
Postgres holds them. `grid` then builds the recall index from those rows in
process, exactly as `memstream rebuild index` does (agents.qdrant_sink's
points, the Qdrant Edge engine), asks every question through the four legs
once per BM25 setting, and runs recall's own fusion, ranking and packing
(services.api.recall) for each combination of weights: seconds per setting
instead of minutes. The profile section is recomputed from the rows the way
MemoryReader.active_profile selects it. Figures are the bench's own
(tests.bench.locomo): R@k by category, R@1000tok and provenance@10.

`make bench-locomo` stays the measurement of record; this is for choosing
between settings, on the dev set only.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from schemas import MemoryRecord, MemoryType
from services.api.models import RecallRequest
from services.api.ranking import Weights
from services.api.recall import _packed, _profile, fused_candidates, fusion_weights
from services.core.config import Settings
from services.embedding import MiniLmEmbedder
from services.stores.index_feed import indexed
from services.stores.postgres import PgPool
from services.stores.postgres.memory_reads import LiveHit
from services.stores.postgres.records import RECORD_COLUMNS, record_from_row, vector_floats
from services.stores.qdrant_edge_index import EdgeIndex
from services.stores.vector import Bm25Encoder, Legs, Scope
from tests.bench import locomo
from tests.bench.pipeline import replay
from tests.bench.probe import wait_drained
from tests.stack import embedded_stack, stack_settings

DEFAULT_ROWS = Path("bench-results/locomo-rows.json")
TOP_K = 50  # as the bench asks
BUDGET = 64_000


async def _dump(dsn: str, users: dict[str, str]) -> list[dict[str, Any]]:
    pool = PgPool(dsn, 1)
    await pool.open()
    try:
        async with pool.connection("tune_dump") as conn:
            cur = await conn.execute(
                f"""SELECT {RECORD_COLUMNS}, embedding, context_embedding FROM memories
                    WHERE tenant_id = %s AND user_id = ANY(%s) AND status = 'active' ORDER BY id""",
                (locomo.TENANT, list(users.values())),
            )
            rows = await cur.fetchall()
    finally:
        await pool.close()
    return [
        {
            "record": record_from_row(r).model_dump(mode="json"),
            "vector": vector_floats(r["embedding"]),
            "context_vector": vector_floats(r["context_embedding"]),
        }
        for r in rows
    ]


def ingest(data: Path, out: Path, extra: dict[str, str]) -> None:
    samples = json.loads(data.read_text())
    env = {"MEMSTREAM_LAG_REFRESH_SECONDS": "0.5", **extra}
    with tempfile.TemporaryDirectory() as tmp, embedded_stack(Path(tmp), extra_env=env) as stack:
        settings = stack_settings(stack)

        async def go() -> list[dict[str, Any]]:
            import httpx

            users = {s["sample_id"]: f"{s['sample_id']}-tune" for s in samples}
            events = [e for s in samples for e in locomo.to_events(s, users[s["sample_id"]])]
            stats: dict[str, Any] = {}
            await replay(settings, events, stats)
            async with httpx.AsyncClient(base_url=stack.base_url, timeout=30, headers=dict(stack.headers)) as c:
                await wait_drained(c, 300)
            print(json.dumps(stats, default=str))
            return [{"users": users}, *await _dump(settings.pg_dsn, users)]

        rows = asyncio.run(go())
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(rows))
    print(f"{len(rows) - 1} memories -> {out}")


@dataclass
class Question:
    sample_id: str
    qa_index: int
    user: str
    text: str
    dense: list[float]
    legs: Legs | None = None
    profile: list[tuple[MemoryRecord, float]] | None = None


def _load(rows_file: Path) -> tuple[dict[str, str], list[tuple[MemoryRecord, list[float], list[float] | None]]]:
    head, *rows = json.loads(rows_file.read_text())
    return head["users"], [
        (MemoryRecord.model_validate(r["record"]), r["vector"], r["context_vector"]) for r in rows if r["vector"]
    ]


def _profiles(
    questions: list[Question], rows: list[tuple[MemoryRecord, list[float], list[float] | None]], min_sim: float
) -> None:
    """MemoryReader.active_profile, in numpy: facts and preferences at or above `min_sim`, best first."""
    limit = max(3, TOP_K // 3)
    for q in questions:
        mine = [
            (r, v) for r, v, _ in rows if r.user_id == q.user and r.type in (MemoryType.FACT, MemoryType.PREFERENCE)
        ]
        if not mine:
            q.profile = []
            continue
        sims = np.asarray([v for _, v in mine]) @ np.asarray(q.dense)
        scored = sorted(
            ((r, float(s)) for (r, _), s in zip(mine, sims, strict=True) if s >= min_sim), key=lambda p: -p[1]
        )
        q.profile = scored[:limit]


async def _legs(
    questions: list[Question],
    rows: list[tuple[MemoryRecord, list[float], list[float] | None]],
    bm25: Bm25Encoder,
    depth: int,
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        index = EdgeIndex(Path(tmp) / "shard")
        await index.ensure(len(rows[0][1]))
        try:
            points = [indexed(r, v, c, bm25) for r, v, c in rows]
            for start in range(0, len(points), 500):
                await index.upsert(points[start : start + 500])
            await index.optimize()
            started = time.perf_counter()
            for q in questions:
                q.legs = await index.legs(Scope(locomo.TENANT, q.user), q.dense, bm25.query(q.text), depth)
            print(f"  legs: {1000 * (time.perf_counter() - started) / len(questions):.2f} ms a question")
        finally:
            await index.close()


def _all_in_context(live: dict[str, LiveHit]) -> dict[str, LiveHit]:
    """The memories as if every one were in the context legs (one missing from them gets 0 there)."""
    return {i: replace(h, has_context=True) for i, h in live.items()}


def evaluate(
    questions: list[Question],
    records: list[MemoryRecord],
    settings: Settings,
    now: dict[str, datetime],
    zero_context: bool = False,
) -> list[dict[str, Any]]:
    """recall()'s own steps after the index answered (every memory active, nothing accessed: the bench's case).

    `records`: every memory, as Postgres answers recall's hits; `now`: per conversation, the moment the
    questions are asked (recency counts back from it).
    """
    live = {r.id: LiveHit.of(r) for r in records}
    live = _all_in_context(live) if zero_context else live
    fusion, weights = fusion_weights(settings), Weights.from_settings(settings)
    pool = max(TOP_K * 3, settings.recall_candidates)
    lines = []
    for q in questions:
        assert q.legs is not None
        assert q.profile is not None
        req = RecallRequest(
            tenant_id=locomo.TENANT, user_id=q.user, query=q.text, top_k=TOP_K, token_budget=BUDGET, record_access=False
        )
        # The dev set is replayed and asked without access marks: no memory has been accessed.
        candidates = _profile(q.profile, req) + fused_candidates(q.legs, live, fusion, req, pool)
        chosen, _, _ = _packed(candidates, req, now[q.sample_id], weights)
        memories = [
            {
                "source": c.source,
                "text": c.text,
                "type": c.type,
            }
            for c in chosen
        ]
        lines.append(
            {"sample_id": q.sample_id, "qa_index": q.qa_index, "retrieved": [locomo.retrieved(m) for m in memories]}
        )
    return lines


def figures(lines: list[dict[str, Any]], answers: Any) -> dict[str, float]:
    table = locomo.recall_at_k(lines, answers)
    overall = table["overall 1-5"]
    out = {k: round(v, 1) for k, v in overall.items() if k != "n"}
    out.update(
        {f"{name[:6]}@10": round(row["R@10"], 1) for name, row in table.items() if not name.startswith("overall")}
    )
    out.update({k: round(v, 2) for k, v in locomo.size_fair(lines, answers).items()})
    return out


def variants(base: Settings) -> Iterator[tuple[str, Settings]]:
    """Named settings to compare (recall side only: the BM25 ones are grouped by `grid`)."""

    def with_(**kw: Any) -> Settings:
        return base.model_copy(update=kw)

    yield "own legs only (context 0, session 0)", with_(recall_context_weight=0.0, recall_session_weight=0.0)
    for ctx in (0.5, 1.0, 1.5):
        for ses in (0.0, 0.2, 0.4):
            yield f"context {ctx}, session {ses}", with_(recall_context_weight=ctx, recall_session_weight=ses)
    yield "memories without context get 0 from the context legs", with_()
    for wd in (0.3, 0.4, 0.5):
        yield f"dense share {wd}", with_(recall_dense_weight=wd, recall_sparse_weight=round(1 - wd, 2))
    for rec in (0.0, 0.02, 0.05, 0.1, 0.25):
        for imp in (0.0, 0.05, 0.1, 0.2):
            for ent in (0.0, 0.02, 0.05):
                yield (
                    f"recency {rec} importance {imp} entity {ent}",
                    with_(recall_weight_recency=rec, recall_weight_importance=imp, recall_weight_entity=ent),
                )


def bm25_variants(base: Settings) -> Iterator[tuple[str, Settings]]:
    yield "bm25 defaults", base
    for b in (0.4, 0.75):
        for avg in (15.0, 40.0):
            yield f"bm25 b={b} avg_len={avg}", base.model_copy(update={"recall_bm25_b": b, "recall_bm25_avg_len": avg})


async def grid(
    samples: list[dict[str, Any]], rows_file: Path, only: list[str], depth: int | None, bm25_only: bool, at_end: bool
) -> None:
    answers = locomo.gold(samples)
    users, rows = _load(rows_file)
    base = Settings()
    model = MiniLmEmbedder()
    asked = [(s["sample_id"], i, qa["question"]) for s in samples for i, qa in enumerate(s["qa"])]
    vectors = model.embed([text for _, _, text in asked])
    questions = [Question(sid, i, users[sid], text, list(v)) for (sid, i, text), v in zip(asked, vectors, strict=True)]
    _profiles(questions, rows, base.profile_min_similarity)
    # Asked the day after each conversation (as `make bench-locomo` does after its replay, only there
    # `now` is the real clock, years after the data's dates, where recency no longer tells sessions apart).
    now = {s["sample_id"]: locomo.maintenance_time(s) if at_end else datetime.now(UTC) for s in samples}
    print(
        f"{len(rows)} memories, {len(questions)} questions, asked {'a day after each conversation' if at_end else 'now'}"
    )
    depth = max(depth or base.recall_leg_depth, TOP_K)  # as recall reads the legs (recall.leg_depth)
    records = [r for r, _, _ in rows]
    # The BM25 settings change the index: one build per setting; the others only what recall does after it.
    for label, bm25_settings in bm25_variants(base) if bm25_only else [("defaults", base)]:
        await _legs(questions, rows, Bm25Encoder.from_settings(bm25_settings), depth)
        print(f"{label}: {json.dumps(figures(evaluate(questions, records, bm25_settings, now), answers))}")
    if bm25_only:
        return
    for name, settings in variants(base):
        if only and not any(o in name for o in only):
            continue
        lines = evaluate(questions, records, settings, now, zero_context="get 0" in name)
        print(f"  {name}: {json.dumps(figures(lines, answers))}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("phase", choices=["ingest", "grid"])
    parser.add_argument("--data", type=Path, default=locomo.DEFAULT_DATA)
    parser.add_argument("--rows", type=Path, default=DEFAULT_ROWS)
    parser.add_argument("--only", nargs="*", default=[])
    parser.add_argument("--depth", type=int)
    parser.add_argument("--bm25", action="store_true", help="compare the BM25 settings only")
    parser.add_argument("--at-end", action="store_true", help="ask a day after each conversation, not now")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE")
    args = parser.parse_args()
    if args.phase == "ingest":
        ingest(args.data, args.rows, locomo.setting_env(args.set))
    else:
        asyncio.run(grid(json.loads(args.data.read_text()), args.rows, args.only, args.depth, args.bm25, args.at_end))


if __name__ == "__main__":
    main()
