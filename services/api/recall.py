"""Recall: the profile close to the query (exact, from Postgres) and fused vector and BM25 hits, ranked together."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from opentelemetry.semconv._incubating.attributes.gen_ai_attributes import (
    GEN_AI_CONVERSATION_ID,
    GEN_AI_REQUEST_TOP_K,
)

from schemas import MemoryRecord, MemoryType
from services.api.access import AccessMarks
from services.api.models import RecalledMemory, RecallRequest, RecallResponse, Source, WorkingTurn, WorkingWindow
from services.api.ranking import Candidate, Weights, pack, pack_sections, prompt_block, prompt_sections, rank
from services.core import metrics, tracing
from services.core.config import Settings
from services.core.open_questions import touches
from services.embedding.query_cache import for_model as query_embeddings
from services.runtime import Runtime
from services.stores.fusion import FusionWeights, RecallFusion, fuse_legs
from services.stores.postgres.memory_reads import LiveHit, PastMatch
from services.stores.postgres.past_context import PastContext, context_legs_as_of
from services.stores.vector import Hit, Legs, Scope

SURFACED = "open_question"
MAX_SURFACED = 2
# The open questions recall looks through (the newest), for those the answer touches.
OPEN_QUESTIONS = 50
PROFILE_TYPES = (MemoryType.FACT, MemoryType.PREFERENCE)
# The GenAI semantic conventions' name for a memory search (gen_ai.operation.name).
SEARCH_MEMORY = "search_memory"


def _from_record(record: MemoryRecord, similarity: float) -> Candidate:
    """A memory read whole from Postgres (the profile, an open question): pinned, always in the answer if it fits."""
    return _from_hit(LiveHit.of(record), similarity, pinned=True)


def _from_hit(hit: LiveHit, similarity: float, *, pinned: bool = False) -> Candidate:
    return Candidate(
        id=hit.id,
        type=hit.type,
        text=hit.text,
        similarity=similarity,
        importance=hit.importance,
        access_count=hit.access_count,
        observed_at=hit.observed_at,
        entities=hit.entities,
        source=hit.source,
        pinned=pinned,
        last_accessed_at=hit.last_accessed_at,
    )


def fused_candidates(
    legs: Legs, live: Mapping[str, LiveHit], fusion: RecallFusion, req: RecallRequest, pool: int
) -> list[Candidate]:
    """The legs' hits that are live, fused, the best `pool` of those the request wants, as candidates.

    Scores are normalised over the live hits only: a point the index still
    holds but Postgres no longer does (superseded a moment ago) takes no place.
    """
    fused = fuse_legs(legs.restricted(live), fusion, live, pool)
    hits = [(live[h.id], h.score) for h in fused if _wanted(live[h.id].compressed, req)]
    best = max((score for _, score in hits), default=0.0)
    return [_from_hit(hit, score / best if best > 0 else 0.0) for hit, score in hits]


def with_profile(profile: list[Candidate], hits: list[Candidate]) -> list[Candidate]:
    """The profile and the index's hits as one candidate list, a memory that is both once.

    A profile memory the index also returned stays pinned and takes the
    better of its two similarities (its cosine, its fused score over the
    best), so a fact that is the best match ranks as one.
    """
    fused = {c.id: c.similarity for c in hits}
    pinned = [replace(p, similarity=max(p.similarity, fused.get(p.id, 0.0))) for p in profile]
    ids = {p.id for p in profile}
    return pinned + [c for c in hits if c.id not in ids]


def fusion_weights(s: Settings) -> RecallFusion:
    """The recall fusion's weights from the settings (services.stores.fusion)."""
    return RecallFusion(
        legs=FusionWeights(dense=s.recall_dense_weight, sparse=s.recall_sparse_weight),
        context=s.recall_context_weight,
        session=s.recall_session_weight,
    )


def leg_depth(s: Settings, req: RecallRequest) -> int:
    """How deep each leg is read: the setting, or top_k if that is more (every leg can fill an answer)."""
    return max(s.recall_leg_depth, req.top_k)


def _wanted(compressed: bool, req: RecallRequest) -> bool:
    """Compressed episodes (folded into a pattern) leave default recall; `include_compressed` brings them back."""
    return req.include_compressed or not compressed


def _profile(scored: list[tuple[MemoryRecord, float]], req: RecallRequest, min_similarity: float) -> list[Candidate]:
    """The profile section: facts, then preferences, each by closeness to the query.

    Only memories close to the query get here, and the standing preferences
    (a diet, an instruction: schemas.memory.STANDING_CATEGORIES) however far
    from it, at most half of `top_k` of those (at least one), the newest
    first. The rest of the profile competes through the index like any other
    memory, so a user with many stated likes does not have them fill every
    answer; "suggest a snack" still sees the peanut allergy.
    """
    wanted = set(req.types or PROFILE_TYPES)
    chosen = [(r, sim) for r, sim in scored if r.type in wanted and _wanted(r.compressed, req)]
    close = [(r, sim) for r, sim in chosen if sim >= min_similarity]
    standing = [(r, sim) for r, sim in chosen if sim < min_similarity][: max(1, req.top_k // 2)]
    close.sort(key=lambda pair: (pair[0].type is not MemoryType.FACT, -pair[1]))
    return [_from_record(r, sim) for r, sim in close + standing]


async def working(rt: Runtime, tenant_id: str, user_id: str, session_id: str) -> WorkingWindow | None:
    return _window(session_id, await rt.windows.working_window(tenant_id, user_id, session_id))


def _window(session_id: str, row: dict[str, Any] | None) -> WorkingWindow | None:
    if row is None:
        return None
    turns = [WorkingTurn.model_validate(t) for t in row["window_turns"]]
    return WorkingWindow(
        session_id=session_id, turns=turns, tokens=row["window_tokens"], closed=row["closed_at"] is not None
    )


def with_defaults(req: RecallRequest, settings: Settings) -> RecallRequest:
    """A request that left out `top_k` or `token_budget` takes the deployment's defaults (the settings)."""
    unset = {
        name: value
        for name, value in (("top_k", settings.recall_top_k), ("token_budget", settings.recall_token_budget))
        if name not in req.model_fields_set
    }
    return req.model_copy(update=unset) if unset else req


async def recall(rt: Runtime, req: RecallRequest, weights: Weights, marks: AccessMarks) -> RecallResponse:
    req = with_defaults(req, rt.settings)
    with tracing.memory_operation(SEARCH_MEMORY, req.tenant_id) as span:
        if span.is_recording():
            span.set_attributes({GEN_AI_REQUEST_TOP_K: req.top_k, tracing.AS_OF: req.as_of is not None})
            if req.session_id:
                span.set_attribute(GEN_AI_CONVERSATION_ID, req.session_id)
        answer = await _recall(rt, req, weights, marks)
        span.set_attribute(tracing.HITS, len(answer.memories))
        return answer


async def _recall(rt: Runtime, req: RecallRequest, weights: Weights, marks: AccessMarks) -> RecallResponse:
    model = await rt.embedder()
    dense = await query_embeddings(model, rt.settings.query_cache_size).embed(req.query)
    now = datetime.now(UTC)
    if req.as_of is not None and req.as_of < now:
        return await _recall_as_of(rt, req, weights, dense, req.as_of)
    types = tuple(t.value for t in req.types) if req.types else ()
    scope = Scope(req.tenant_id, req.user_id, types)
    pool = max(req.top_k * 3, rt.settings.recall_candidates)
    legs = await rt.index.legs(scope, dense, rt.bm25.query(req.query), leg_depth(rt.settings, req))
    # The rest is one round trip to Postgres (services/stores/postgres/memory_reads.py): the hits as they are
    # now (the index answers ids and scores; it follows Postgres through memory.changes, so a fact superseded
    # a moment ago is dropped here), the profile close to the query, the open questions, the working window.
    reads = await rt.reads.recall_reads(
        req.tenant_id,
        req.user_id,
        hit_ids=legs.ids(),
        query=dense,
        min_similarity=rt.settings.profile_min_similarity,
        profile_limit=max(3, req.top_k // 3),
        questions_limit=OPEN_QUESTIONS if _asks_questions(req) else 0,
        session_id=req.session_id,
    )
    profile = _profile(reads.profile, req, rt.settings.profile_min_similarity)
    candidates = with_profile(profile, fused_candidates(legs, reads.hits, fusion_weights(rt.settings), req, pool))
    chosen, used, prompt = _packed(candidates, req, now, weights)
    window = _window(req.session_id, reads.window) if req.session_id else None
    open_ids, extra = _open_questions(req, chosen, reads.questions)
    # Sent only once the answer is complete: a recall that fails marks nothing. Surfaced questions
    # are returned memories too: their access count is how often recall surfaced them (maintenance defers on it).
    if req.record_access:
        marks.mark(req.tenant_id, req.user_id, [c.id for c in chosen] + [q.id for q in extra], now)
    memories = [_recalled(c, surfaced=c.id in open_ids) for c in chosen]
    memories += [_recalled(_from_record(q, 0.0), surfaced=True) for q in extra]
    if open_ids & {m.id for m in memories}:
        prompt += "\n" + framing([m.text for m in memories if m.surfaced])
    return RecallResponse(memories=memories, prompt=prompt, tokens_used=used, working=window)


def _packed(
    candidates: list[Candidate], req: RecallRequest, now: datetime, weights: Weights
) -> tuple[list[Candidate], int, str]:
    """Ranked as of `now`, packed into the budget, and the prompt they make."""
    ranked = rank(candidates, req.query, now, weights)
    sections = req.format == "sections"
    chosen, used = (pack_sections if sections else pack)(ranked, req.top_k, req.token_budget)
    metrics.RECALL_RESULTS.observe(len(chosen))
    metrics.RECALL_TOKENS.observe(used)
    return chosen, used, prompt_sections(chosen) if sections else prompt_block(chosen)


def _as_it_was(record: MemoryRecord, at: datetime) -> MemoryRecord:
    """A later recall is not part of the past: a last access after `at` is dropped (its count cannot be split)."""
    if record.last_accessed_at is not None and record.last_accessed_at > at:
        return record.model_copy(update={"last_accessed_at": None})
    return record


async def _recall_as_of(
    rt: Runtime, req: RecallRequest, weights: Weights, dense: list[float], at: datetime
) -> RecallResponse:
    """Recall as memory stood at `at`, from Postgres (the index holds only what is active now).

    The same shape as today's recall: profile facts and preferences close to
    the query, pinned, and the four legs (own and context, dense and lexical:
    services/stores/postgres/past_context.py) fused as live recall fuses
    them, ranked with `now = at`. Nothing is marked as accessed, no open question is
    surfaced and no working window is returned: those are today's state,
    and looking at the past must not change memory.
    """
    types = tuple(t.value for t in req.types) if req.types else ()
    pool = max(req.top_k * 3, rt.settings.recall_candidates)
    depth = leg_depth(rt.settings, req)
    found = await rt.reads.recall_as_of(req.tenant_id, req.user_id, dense, req.query, at, types=types, limit=depth)
    context = await context_legs_as_of(
        rt.pg, req.tenant_id, req.user_id, dense, req.query, at, types=types, limit=depth
    )
    found = [m for m in found if _wanted(m.record.compressed, req)]
    records = {m.record.id: _as_it_was(m.record, at) for m in found}
    records.update({i: _as_it_was(r, at) for i, r in context.records.items() if _wanted(r.compressed, req)})
    min_similarity = rt.settings.profile_min_similarity
    close = [
        (records[m.record.id], m.similarity)
        for m in found
        if m.similarity is not None and m.similarity >= min_similarity and m.record.type in PROFILE_TYPES
    ]
    close.sort(key=lambda pair: -pair[1])
    profile = _profile(close[: max(3, req.top_k // 3)], req, min_similarity)
    live = {i: LiveHit.of(r) for i, r in records.items()}
    hits = fused_candidates(_past_legs(found, context), live, fusion_weights(rt.settings), req, pool)
    candidates = with_profile(profile, hits)
    chosen, used, prompt = _packed(candidates, req, at, weights)
    return RecallResponse(memories=[_recalled(c) for c in chosen], prompt=prompt, tokens_used=used)


def _past_legs(found: list[PastMatch], context: PastContext) -> Legs:
    """The four legs of a past view, as the index would have answered them."""

    def leg(pairs: Iterable[tuple[str, float]]) -> list[Hit]:
        return [Hit(i, score) for i, score in pairs]

    return Legs(
        dense=leg((m.record.id, m.similarity) for m in found if m.dense and m.similarity is not None),
        sparse=leg((m.record.id, m.text_rank) for m in found if m.text_rank is not None),
        dense_ctx=leg(context.dense),
        sparse_ctx=leg(context.lexical),
    )


def _asks_questions(req: RecallRequest) -> bool:
    return not req.types or MemoryType.QUESTION in req.types


def _open_questions(
    req: RecallRequest, chosen: list[Candidate], questions: list[MemoryRecord]
) -> tuple[set[str], list[MemoryRecord]]:
    """Open questions the query or the rest of the answer touch: those in the answer, and up to MAX_SURFACED more.

    Only questions in state `open`: a deferred one (maintenance: surfaced often, or open long) is not
    surfaced again, though it stays a memory like any other and a later answer still resolves it.
    """
    chosen_ids = {c.id for c in chosen}
    touched = [q for q in questions if touches(q, req.query, [c.entities for c in chosen if c.id != q.id])]
    extra = [q for q in touched if q.id not in chosen_ids]
    return {q.id for q in touched}, extra[:MAX_SURFACED]


def framing(questions: list[str]) -> str:
    """The prompt's note on surfaced questions, so the assistant may follow up instead of ignoring them."""
    lines = [f"[OPEN QUESTION] {q}" for q in questions]
    return "\n".join(
        ["<open_questions>", "The user asked these earlier and they are not yet resolved:", *lines, "</open_questions>"]
    )


def _recalled(c: Candidate, *, surfaced: bool = False) -> RecalledMemory:
    src: dict[str, Any] = c.source
    return RecalledMemory(
        surfaced=SURFACED if surfaced else None,
        id=c.id,
        type=c.type,
        text=c.text,
        score=round(c.score, 6),
        signals={k: round(v, 6) for k, v in c.signals.items()},
        observed_at=c.observed_at,
        layer=c.layer,
        access_count=c.access_count,
        last_accessed_at=c.last_accessed_at,
        source=Source(
            session_id=src.get("session_id"),
            event_ids=list(src.get("event_ids", [])),
            metadata=list(src.get("metadata", [])),
        ),
    )
