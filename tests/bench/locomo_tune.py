"""Tuning recall on the LoCoMo dev set without replaying it for every setting.

    python -m tests.bench.locomo_tune ingest [--data PATH] [--rows FILE]
    python -m tests.bench.locomo_tune grid   [--data PATH] [--rows FILE] [--only NAME ...] [--split N]
    python -m tests.bench.locomo_tune hops   [--data PATH] [--rows FILE] [--only spread|prf|dense ...]

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

Every setting is also scored per part: the first `--split` conversations
(where settings are chosen) and the rest (where a choice is confirmed on
questions it never saw): R@5, R@10 and multi-hop R@10 of each.

`hops` measures second-look steps for questions whose evidence is spread
over sessions: a penalty per memory of a session already in the answer
(`spread_sessions`), the BM25 query widened by terms its best hits share
(`expansion`, from their texts or entities), and the dense query moved
toward its best hits (dense feedback). On the dev set none of them gained
more than about a point on the held-out part (the spread lost several), so
recall has none of them; they stay here to be measured again.

`make bench-locomo` stays the measurement of record; this is for choosing
between settings, on the dev set only.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from schemas import MemoryRecord, MemoryType
from schemas.memory import STANDING_CATEGORIES
from services.api.models import RecallRequest
from services.api.ranking import Candidate, Weights, pack, rank
from services.api.recall import _packed, _profile, fused_candidates, fusion_weights, with_profile
from services.core.config import Settings
from services.embedding import MiniLmEmbedder
from services.stores.fusion import RecallFusion, fuse_legs, session_in
from services.stores.index_feed import indexed
from services.stores.postgres import PgPool
from services.stores.postgres.memory_reads import STANDING_LIMIT, LiveHit
from services.stores.postgres.records import RECORD_COLUMNS, record_from_row, vector_floats
from services.stores.qdrant_edge_index import EdgeIndex
from services.stores.vector import Bm25Encoder, Legs, Scope, Sparse
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
    """MemoryReader.active_profile, in numpy: facts and preferences at or above `min_sim`, best first, then the
    standing preferences below it, newest first."""
    limit = max(3, TOP_K // 3)
    for q in questions:
        mine = [
            (r, v) for r, v, _ in rows if r.user_id == q.user and r.type in (MemoryType.FACT, MemoryType.PREFERENCE)
        ]
        if not mine:
            q.profile = []
            continue
        sims = np.asarray([v for _, v in mine]) @ np.asarray(q.dense)
        scored = [(r, float(s)) for (r, _), s in zip(mine, sims, strict=True)]
        close = sorted(((r, s) for r, s in scored if s >= min_sim), key=lambda p: -p[1])[:limit]
        standing = sorted(
            (
                (r, s)
                for r, s in scored
                if s < min_sim and r.type is MemoryType.PREFERENCE and r.category in STANDING_CATEGORIES
            ),
            key=lambda p: (-p[0].observed_at.timestamp(), p[0].id),
        )
        q.profile = close + standing[:STANDING_LIMIT]


@asynccontextmanager
async def _index(
    rows: list[tuple[MemoryRecord, list[float], list[float] | None]], bm25: Bm25Encoder
) -> AsyncIterator[EdgeIndex]:
    """The recall index of `rows`, built as `memstream rebuild index` builds it, in a temporary directory."""
    with tempfile.TemporaryDirectory() as tmp:
        index = EdgeIndex(Path(tmp) / "shard")
        await index.ensure(len(rows[0][1]))
        try:
            points = [indexed(r, v, c, bm25) for r, v, c in rows]
            for start in range(0, len(points), 500):
                await index.upsert(points[start : start + 500])
            await index.optimize()
            yield index
        finally:
            await index.close()


async def _ask(index: EdgeIndex, questions: list[Question], bm25: Bm25Encoder, depth: int) -> None:
    started = time.perf_counter()
    for q in questions:
        q.legs = await index.legs(Scope(locomo.TENANT, q.user), q.dense, bm25.query(q.text), depth)
    print(f"  legs: {1000 * (time.perf_counter() - started) / len(questions):.2f} ms a question")


async def _legs(
    questions: list[Question],
    rows: list[tuple[MemoryRecord, list[float], list[float] | None]],
    bm25: Bm25Encoder,
    depth: int,
) -> None:
    async with _index(rows, bm25) as index:
        await _ask(index, questions, bm25, depth)


def _all_in_context(live: dict[str, LiveHit]) -> dict[str, LiveHit]:
    """The memories as if every one were in the context legs (one missing from them gets 0 there)."""
    return {i: replace(h, has_context=True) for i, h in live.items()}


def evaluate(
    questions: list[Question],
    records: list[MemoryRecord],
    settings: Settings,
    now: dict[str, datetime],
    zero_context: bool = False,
    weights: Weights | None = None,
    second: dict[tuple[str, int], Legs] | None = None,
    spread: float = 0.0,
) -> list[dict[str, Any]]:
    """recall()'s own steps after the index answered (every memory active, nothing accessed: the bench's case).

    `records`: every memory, as Postgres answers recall's hits; `now`: per conversation, the moment the
    questions are asked (recency counts back from it); `weights`: instead of the settings' ones;
    `second`: per question, the legs a second hop answered (instead of the question's own); `spread`:
    the session spread penalty (`spread_sessions`) between ranking and packing.
    """
    live = {r.id: LiveHit.of(r) for r in records}
    live = _all_in_context(live) if zero_context else live
    fusion, weights = fusion_weights(settings), weights or Weights.from_settings(settings)
    pool = max(TOP_K * 3, settings.recall_candidates)
    lines = []
    for q in questions:
        assert q.legs is not None
        assert q.profile is not None
        req = RecallRequest(
            tenant_id=locomo.TENANT, user_id=q.user, query=q.text, top_k=TOP_K, token_budget=BUDGET, record_access=False
        )
        # The dev set is replayed and asked without access marks: no memory has been accessed.
        legs = second[(q.sample_id, q.qa_index)] if second else q.legs
        profile = _profile(q.profile, req, settings.profile_min_similarity)
        candidates = with_profile(profile, fused_candidates(legs, live, fusion, req, pool))
        if spread > 0:
            ranked = spread_sessions(rank(candidates, req.query, now[q.sample_id], weights), spread, TOP_K)
            chosen, _ = pack(ranked, TOP_K, BUDGET)
        else:
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


def parts(samples: list[dict[str, Any]], split: int) -> dict[str, set[str]]:
    """The conversations settings are chosen on (the first `split`) and those they are confirmed on (the rest)."""
    ids = [s["sample_id"] for s in samples]
    return {f"0-{split - 1}": set(ids[:split]), f"{split}-{len(ids) - 1}": set(ids[split:])}


def short(lines: list[dict[str, Any]], answers: Any, part: set[str], backing: locomo.TurnStems | None = None) -> str:
    """R@5, R@10 and multi-hop R@10 of one part's questions (the goal's three figures); with `backing`, text-backed too.

    The text-backed pair (locomo.recall_at_k) shows a gain that provenance alone bought: an episode
    credited for turns its text does not hold.
    """
    mine = [line for line in lines if line["sample_id"] in part]
    table = locomo.recall_at_k(mine, answers)
    overall, multi = table["overall 1-5"], table["multi-hop"]

    def at(row: dict[str, float], k: str) -> str:
        return f"{row[k]:.1f}" if k in row else "-"  # a part without such questions

    shown = f"R@5 {at(overall, 'R@5')} R@10 {at(overall, 'R@10')} multi@10 {at(multi, 'R@10')}"
    if backing is None:
        return shown
    backed = locomo.recall_at_k(mine, answers, backing)
    return shown + f" (text-backed R@10 {at(backed['overall 1-5'], 'R@10')} multi@10 {at(backed['multi-hop'], 'R@10')})"


def by_part(
    lines: list[dict[str, Any]], answers: Any, split: dict[str, set[str]], backing: locomo.TurnStems | None = None
) -> str:
    return " | ".join(f"{name}: {short(lines, answers, ids, backing)}" for name, ids in split.items())


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


@dataclass
class Asked:
    """Every question of the dev set, embedded, with what recall needs besides the index."""

    questions: list[Question]
    rows: list[tuple[MemoryRecord, list[float], list[float] | None]]
    records: list[MemoryRecord]
    now: dict[str, datetime]
    depth: int
    answers: Any
    backing: locomo.TurnStems


def _asked(samples: list[dict[str, Any]], rows_file: Path, depth: int | None, at_end: bool) -> Asked:
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
    return Asked(questions, rows, records, now, depth, locomo.gold(samples), locomo.turn_stems(samples))


async def grid(
    samples: list[dict[str, Any]],
    rows_file: Path,
    only: list[str],
    depth: int | None,
    bm25_only: bool,
    at_end: bool,
    split: int,
) -> None:
    a = _asked(samples, rows_file, depth, at_end)
    halves = parts(samples, split)
    base = Settings()
    # The BM25 settings change the index: one build per setting; the others only what recall does after it.
    for label, bm25_settings in bm25_variants(base) if bm25_only else [("defaults", base)]:
        await _legs(a.questions, a.rows, Bm25Encoder.from_settings(bm25_settings), a.depth)
        lines = evaluate(a.questions, a.records, bm25_settings, a.now)
        print(f"{label}: {json.dumps(figures(lines, a.answers))}\n  {by_part(lines, a.answers, halves, a.backing)}")
    if bm25_only:
        return
    for name, settings in variants(base):
        if only and not any(o in name for o in only):
            continue
        lines = evaluate(a.questions, a.records, settings, a.now, zero_context="get 0" in name)
        print(f"  {name}: {json.dumps(figures(lines, a.answers))}\n    {by_part(lines, a.answers, halves, a.backing)}")


# The second-hop steps measured here (none reached the goal on held-out conversations; see `hops`).


def spread_sessions(ranked: list[Candidate], penalty: float, depth: int) -> list[Candidate]:
    """`ranked` with its first `depth` unpinned places re-chosen: score less `penalty` per memory of its session taken.

    Pinned memories keep their places ahead; a memory without a session is
    never penalised; the rest of the list keeps its order after the
    re-chosen ones. With `penalty` 0 the list is returned as it is.
    """
    if penalty <= 0 or depth <= 0:
        return ranked
    pinned = [c for c in ranked if c.pinned]
    rest = [c for c in ranked if not c.pinned]
    sessions = [session_in(c.source) for c in rest]
    left = list(range(len(rest)))
    taken: Counter[str] = Counter()
    order: list[int] = []
    while left and len(order) < depth:
        # The first best in rank order: ties keep rank()'s order.
        best, top = 0, float("-inf")
        for at, i in enumerate(left):
            sid = sessions[i]
            value = rest[i].score - (penalty * taken[sid] if sid is not None else 0.0)
            if value > top:
                best, top = at, value
        i = left.pop(best)
        if (sid := sessions[i]) is not None:
            taken[sid] += 1
        order.append(i)
    return pinned + [rest[i] for i in order] + [rest[i] for i in left]


def expansion(query: Sparse, hit_terms: Iterable[Sparse], terms: int, weight: float, min_hits: int = 2) -> Sparse:
    """The query with up to `terms` new terms at `weight`: those most of the given hits hold (at least `min_hits`).

    `hit_terms` are the best first-hop hits' texts as BM25 query terms (each
    term once per hit). The query's own terms keep their weight; IDF comes
    from the index, so a term every memory holds adds little. Ties go to the
    smaller term index (a stable query).
    """
    own = set(query.indices)
    counts: Counter[int] = Counter()
    for sparse in hit_terms:
        counts.update(t for t in set(sparse.indices) if t not in own)
    extra = sorted(((n, t) for t, n in counts.items() if n >= min_hits), key=lambda p: (-p[0], p[1]))[:terms]
    if not extra or weight <= 0:
        return query
    return Sparse(list(query.indices) + [t for _, t in extra], list(query.values) + [weight] * len(extra))


def spread_variants(base: Settings) -> Iterator[tuple[str, Settings, float]]:
    """Session spread penalties, alone and with a weaker session cue (which it partly undoes)."""
    for session in (base.recall_session_weight, 0.2, 0.0):
        for penalty in (0.0, 0.02, 0.04, 0.06, 0.08, 0.1, 0.15):
            yield (
                f"session {session} spread {penalty}",
                base.model_copy(update={"recall_session_weight": session}),
                penalty,
            )


def _hit_terms(
    q: Question, live: dict[str, LiveHit], fusion: RecallFusion, bm25: Bm25Encoder, top: int, source: str
) -> list[Sparse]:
    """The best `top` first-hop hits (fused as recall fuses them) as BM25 query terms: of their texts or entities."""
    assert q.legs is not None
    best = fuse_legs(q.legs.restricted(live), fusion, live, top)
    texts = [live[h.id].text if source == "text" else " ".join(live[h.id].entities) for h in best]
    return [bm25.query(t) for t in texts if t]


async def hops(
    samples: list[dict[str, Any]], rows_file: Path, depth: int | None, at_end: bool, split: int, only: list[str]
) -> None:
    """The second-hop steps (services.api.hops): session spread, then BM25 queries widened by the first hop's hits."""
    a = _asked(samples, rows_file, depth, at_end)
    halves = parts(samples, split)
    base = Settings()
    bm25 = Bm25Encoder.from_settings(base)
    live = {r.id: LiveHit.of(r) for r in a.records}

    def show(name: str, lines: list[dict[str, Any]]) -> None:
        print(f"  {name}: {by_part(lines, a.answers, halves, a.backing)}", flush=True)

    async with _index(a.rows, bm25) as index:
        await _ask(index, a.questions, bm25, a.depth)
        for name, settings, penalty in spread_variants(base):
            if only and not any(o in name for o in only):
                continue
            show(name, evaluate(a.questions, a.records, settings, a.now, spread=penalty))
        if only and not any(o in ("prf", "dense") for o in only):
            return
        fusion = fusion_weights(base)
        if not only or any("dense" in o for o in only):
            await _dense_feedback(index, a, live, fusion, show)
        if only and not any("prf" in o for o in only):
            return
        for source in ("text", "entities"):
            for top in (3, 5, 10):
                terms_of = {
                    (q.sample_id, q.qa_index): _hit_terms(q, live, fusion, bm25, top, source) for q in a.questions
                }
                for terms in (5, 10, 20):
                    for weight in (0.2, 0.4):
                        second: dict[tuple[str, int], Legs] = {}
                        started = time.perf_counter()
                        for q in a.questions:
                            key = (q.sample_id, q.qa_index)
                            wide = expansion(bm25.query(q.text), terms_of[key], terms, weight)
                            second[key] = await index.legs(Scope(locomo.TENANT, q.user), q.dense, wide, a.depth)
                        ms = 1000 * (time.perf_counter() - started) / len(a.questions)
                        lines = evaluate(a.questions, a.records, base, a.now, second=second)
                        show(f"prf {source} top {top} terms {terms} weight {weight} ({ms:.1f} ms)", lines)


async def _dense_feedback(
    index: EdgeIndex, a: Asked, live: dict[str, LiveHit], fusion: RecallFusion, show: Any
) -> None:
    """Dense pseudo-relevance feedback: the question's vector moved toward the mean of its best first-hop hits."""
    vectors = {r.id: np.asarray(v) for r, v, _ in a.rows}
    bm25 = Bm25Encoder.from_settings(Settings())
    for top in (3, 5, 10):
        for share in (0.3, 0.6, 1.0):
            second: dict[tuple[str, int], Legs] = {}
            for q in a.questions:
                assert q.legs is not None
                best = fuse_legs(q.legs.restricted(live), fusion, live, top)
                moved = np.asarray(q.dense) + share * np.mean([vectors[h.id] for h in best], axis=0)
                moved /= np.linalg.norm(moved)
                scope = Scope(locomo.TENANT, q.user)
                second[(q.sample_id, q.qa_index)] = await index.legs(scope, list(moved), bm25.query(q.text), a.depth)
            show(
                f"dense feedback top {top} share {share}",
                evaluate(a.questions, a.records, Settings(), a.now, second=second),
            )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("phase", choices=["ingest", "grid", "hops"])
    parser.add_argument("--data", type=Path, default=locomo.DEFAULT_DATA)
    parser.add_argument("--rows", type=Path, default=DEFAULT_ROWS)
    parser.add_argument("--only", nargs="*", default=[])
    parser.add_argument("--depth", type=int)
    parser.add_argument("--bm25", action="store_true", help="compare the BM25 settings only")
    parser.add_argument("--at-end", action="store_true", help="ask a day after each conversation, not now")
    parser.add_argument(
        "--split", type=int, default=3, help="choose on the first SPLIT conversations, confirm on the rest"
    )
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE")
    args = parser.parse_args()
    samples = json.loads(args.data.read_text()) if args.phase != "ingest" else []
    if args.phase == "ingest":
        ingest(args.data, args.rows, locomo.setting_env(args.set))
    elif args.phase == "grid":
        asyncio.run(grid(samples, args.rows, args.only, args.depth, args.bm25, args.at_end, args.split))
    else:
        asyncio.run(hops(samples, args.rows, args.depth, args.at_end, args.split, args.only))


if __name__ == "__main__":
    main()
