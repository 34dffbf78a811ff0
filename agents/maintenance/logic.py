"""Maintenance decisions as pure functions: what one pass does to one user's memories.

Everything here is a function of the records, their vectors and `now`, so the
same inputs always plan the same writes (deterministic ids, no clock reads):
that is what makes a pass idempotent and a re-run after a crash harmless.

Rules of a pass, in this order, over the user's active memories:

1. decay: a memory not accessed (`last_accessed_at`, else `created_at`) for
   `decay_after` loses `decay_rate` importance, never below 0, at most once
   per pass moment: only if it was last updated before `now` (a second pass
   with the same `now` finds it updated at `now` and leaves it);
2. prune: importance (after decay) below `prune_below` and unaccessed for
   `prune_after` → status `pruned`, op `deleted`, the reason in the change;
3. patterns: single-link clusters (connected components of the graph whose
   edges join episodes with cosine ≥ `pattern_similarity`) among active,
   uncompressed episodes; a cluster of ≥ `pattern_min` episodes becomes one
   `pattern` memory, and its members get `compressed = true` (out of the
   index, hence out of default recall, kept in Postgres);
4. semantic: a topic term (an episode's `category` topics and its entities,
   lower-cased) qualifies when the active episodes carrying it, counted back
   `semantic_window` from the latest of them, come from ≥ 2 sessions; one
   `semantic` memory per topic, superseded by a new version only when an
   episode it does not already cover joins (losing members to a prune does
   not churn it);
5. questions: an `open` question still active after the above moves to
   `deferred` when recall has surfaced it `question_max_surfaced` times
   (its `access_count`: every surfacing is an access mark) or it was asked
   (`observed_at`) more than `question_defer_after` before `now`; `attempts`
   records the surfacings. Deferred is a state, not a status: the question
   stays active (listed, in history), recall stops surfacing it, and a later
   answer still resolves it. A deferred question is never deferred again, so
   a re-run changes nothing.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import numpy as np

from schemas import ChangeOp, MemoryRecord, MemoryStatus, MemoryType, Provenance
from schemas.memory import QuestionState
from services.config import Settings
from services.textutil import content_hash, stable_id

PATTERN_SIMILARITY = 0.75
SYNTHESIZED_IMPORTANCE = 0.6
THEME_TERMS = 5
SNIPPET_CHARS = 200
MAX_ENTITIES = 20


@dataclass(frozen=True)
class Rules:
    decay_rate: float
    decay_after: timedelta
    prune_below: float
    prune_after: timedelta
    pattern_min: int
    semantic_window: timedelta
    pattern_similarity: float = PATTERN_SIMILARITY
    question_max_surfaced: int = 3
    question_defer_after: timedelta = timedelta(days=30)

    @classmethod
    def from_settings(cls, s: Settings) -> Rules:
        return cls(
            decay_rate=s.decay_rate,
            decay_after=timedelta(days=s.decay_after_days),
            prune_below=s.prune_below,
            prune_after=timedelta(days=s.prune_after_days),
            pattern_min=s.pattern_min_episodes,
            semantic_window=timedelta(days=s.semantic_window_days),
            question_max_surfaced=s.question_max_surfaced,
            question_defer_after=timedelta(days=s.question_defer_days),
        )


Vector = list[float]


@dataclass
class Plan:
    """The pass's outcome for one user: the new state of every record it touched, and why."""

    original: dict[str, MemoryRecord]
    state: dict[str, MemoryRecord] = field(default_factory=dict)
    vectors: dict[str, Vector | None] = field(default_factory=dict)
    reasons: dict[str, list[str]] = field(default_factory=dict)
    counts: Counter[str] = field(default_factory=Counter)

    def current(self, record_id: str) -> MemoryRecord:
        return self.state.get(record_id) or self.original[record_id]

    def touch(self, record: MemoryRecord, kind: str, reason: str) -> None:
        self.state[record.id] = record
        self.reasons.setdefault(record.id, []).append(reason)
        self.counts[kind] += 1

    def active(self) -> list[MemoryRecord]:
        ids = list(self.original) + [i for i in self.state if i not in self.original]
        return [r for r in (self.current(i) for i in ids) if r.status is MemoryStatus.ACTIVE]


@dataclass(frozen=True)
class Effect:
    """One record's change of this pass: its final state, with the version bumped once."""

    record: MemoryRecord
    op: ChangeOp
    reason: str
    vector: Vector | None


# --- decay and prune -------------------------------------------------------------


def last_access(record: MemoryRecord) -> datetime:
    return record.last_accessed_at or record.created_at


def decay(record: MemoryRecord, now: datetime, rules: Rules) -> MemoryRecord | None:
    """The record with less importance, or None when this pass leaves it as it is."""
    if record.status is not MemoryStatus.ACTIVE or record.importance <= 0:
        return None
    if now - last_access(record) < rules.decay_after or record.updated_at >= now:
        return None
    importance = max(0.0, round(record.importance - rules.decay_rate, 6))
    if importance >= record.importance:  # a zero rate (or rounding) never raises importance
        return None
    return record.model_copy(update={"importance": importance, "updated_at": now})


def prune(record: MemoryRecord, now: datetime, rules: Rules) -> MemoryRecord | None:
    """The record marked pruned, or None when it is still worth keeping."""
    if record.status is not MemoryStatus.ACTIVE or record.importance >= rules.prune_below:
        return None
    if now - last_access(record) < rules.prune_after:
        return None
    return record.model_copy(update={"status": MemoryStatus.PRUNED, "updated_at": now})


# --- open questions --------------------------------------------------------------


def defer(record: MemoryRecord, now: datetime, rules: Rules) -> tuple[MemoryRecord, str] | None:
    """The question moved to `deferred` and why, or None when it stays as it is.

    Only an active question in state `open` is deferred: surfaced at least
    `question_max_surfaced` times (its access count), or asked more than
    `question_defer_after` before `now`. `attempts` becomes the surfacings.
    """
    question = record.question
    if record.type is not MemoryType.QUESTION or record.status is not MemoryStatus.ACTIVE:
        return None
    if question is None or question.state is not QuestionState.OPEN:
        return None
    surfaced = record.access_count
    age = now - record.observed_at
    if surfaced >= rules.question_max_surfaced:
        why = f"surfaced {surfaced} times without an answer (limit {rules.question_max_surfaced})"
    elif age > rules.question_defer_after:
        why = f"open for {age.days} days without an answer (limit {_days(rules.question_defer_after)})"
    else:
        return None
    state = question.model_copy(update={"state": QuestionState.DEFERRED, "attempts": surfaced})
    return record.model_copy(update={"question": state, "updated_at": now}), f"deferred: {why}"


def _days(span: timedelta) -> str:
    days = span / timedelta(days=1)
    return f"{days:g} days"


# --- patterns --------------------------------------------------------------------


def unit(vector: Sequence[float]) -> np.ndarray:
    v = np.asarray(vector, dtype=np.float64)
    norm = float(np.linalg.norm(v))
    return v / norm if norm > 0 else v


def mean_vector(vectors: Iterable[Sequence[float]]) -> Vector:
    """The normalised mean: where a group of members points, in the same space as they do."""
    return [float(x) for x in unit(np.mean([unit(v) for v in vectors], axis=0))]


def clusters(vectors: Sequence[Sequence[float]], threshold: float) -> list[list[int]]:
    """Connected components (single link) of the cosine ≥ threshold graph, as sorted index lists."""
    n = len(vectors)
    if n == 0:
        return []
    m = np.stack([unit(v) for v in vectors])
    linked = (m @ m.T) >= threshold
    parent = list(range(n))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i in range(n):
        for j in range(i + 1, n):
            if linked[i, j]:
                parent[root(j)] = root(i)
    groups: dict[int, list[int]] = {}
    for i in range(n):
        groups.setdefault(root(i), []).append(i)
    return sorted(groups.values())


def terms_of(record: MemoryRecord) -> set[str]:
    """An episode's topic terms: its `category` topics and its entities, lower-cased."""
    topics = (record.category or "").split(",")
    return {t.strip().lower() for t in [*topics, *record.entities] if t.strip()}


def common_theme(records: Sequence[MemoryRecord]) -> list[str]:
    """Terms carried by at least half of the records, most frequent first (the top 3 if none is)."""
    counts = Counter(t for r in records for t in terms_of(r))
    ranked = sorted(counts, key=lambda t: (-counts[t], t))
    common = [t for t in ranked if counts[t] >= math.ceil(len(records) / 2)]
    return (common or ranked[:3])[:THEME_TERMS]


def union_provenance(members: Sequence[MemoryRecord], metadata: dict[str, object]) -> Provenance:
    """Every member's event ids (in observation order, once), the latest member's session."""
    ordered = sorted(members, key=lambda r: (r.observed_at, r.id))
    event_ids = list(dict.fromkeys(e for r in ordered for e in r.source.event_ids))
    return Provenance(session_id=ordered[-1].source.session_id, event_ids=event_ids, metadata=[metadata])


def synthesized(
    record_id: str, type_: MemoryType, text: str, category: str | None, members: Sequence[MemoryRecord], now: datetime
) -> MemoryRecord:
    latest = max(members, key=lambda r: (r.observed_at, r.id))
    ids = sorted(r.id for r in members)
    sessions = sorted({r.source.session_id for r in members})
    entities = sorted({e for r in members for e in r.entities})[:MAX_ENTITIES]
    return MemoryRecord(
        id=record_id,
        tenant_id=latest.tenant_id,
        user_id=latest.user_id,
        type=type_,
        text=text,
        content_hash=content_hash(text),
        category=category,
        key_name=category if type_ is MemoryType.SEMANTIC else None,
        importance=SYNTHESIZED_IMPORTANCE,
        confidence=round(sum(r.confidence for r in members) / len(members), 6),
        status=MemoryStatus.ACTIVE,
        observed_at=latest.observed_at,
        created_at=now,
        updated_at=now,
        source=union_provenance(members, {"synthesized": type_.value, "memory_ids": ids, "session_ids": sessions}),
        entities=entities,
    )


def pattern_text(theme: Sequence[str], members: Sequence[MemoryRecord]) -> str:
    sessions = len({r.source.session_id for r in members})
    about = ", ".join(theme) or "similar conversations"
    return f"Recurring theme across {len(members)} episodes in {sessions} sessions: {about}."


def pattern_of(members: Sequence[MemoryRecord], now: datetime) -> MemoryRecord:
    first = members[0]
    record_id = stable_id(first.tenant_id, first.user_id, MemoryType.PATTERN.value, *sorted(r.id for r in members))
    theme = common_theme(members)
    category = ", ".join(theme[:3]) or None
    return synthesized(record_id, MemoryType.PATTERN, pattern_text(theme, members), category, members, now)


# --- semantic topics -------------------------------------------------------------


def topics(episodes: Sequence[MemoryRecord], window: timedelta) -> dict[str, list[MemoryRecord]]:
    """Each qualifying topic term with its member episodes (those within `window` of its latest one)."""
    by_term: dict[str, list[MemoryRecord]] = {}
    for episode in episodes:
        for term in terms_of(episode):
            by_term.setdefault(term, []).append(episode)
    found = {}
    for term, carrying in sorted(by_term.items()):
        latest = max(r.observed_at for r in carrying)
        members = sorted((r for r in carrying if r.observed_at >= latest - window), key=lambda r: r.id)
        if len({r.source.session_id for r in members}) >= 2:
            found[term] = members
    return found


def covered(record: MemoryRecord) -> set[str]:
    """The member ids a synthesized record says it was built from."""
    return {i for m in record.source.metadata for i in m.get("memory_ids", [])}


def semantic_text(topic: str, members: Sequence[MemoryRecord]) -> str:
    ordered = sorted(members, key=lambda r: (r.observed_at, r.id))
    sessions = len({r.source.session_id for r in members})
    span = f"{ordered[0].observed_at.date().isoformat()} to {ordered[-1].observed_at.date().isoformat()}"
    snippet = ordered[-1].text[:SNIPPET_CHARS]
    return f"Recurring topic: {topic}. Discussed in {sessions} sessions ({span}). Most recently: {snippet}"


def semantic_of(
    topic: str, members: Sequence[MemoryRecord], previous: MemoryRecord | None, everything: dict[str, MemoryRecord]
) -> tuple[list[MemoryRecord], str] | None:
    """The members of a new version of the topic's memory and its id, or None if nothing new joined.

    A new version covers the previous version's members too, so its
    provenance is the topic's whole history, not only the latest window.
    """
    known = covered(previous) if previous is not None else set()
    if previous is not None and {r.id for r in members} <= known:
        return None
    union = {r.id: r for r in members}
    union.update({i: everything[i] for i in known if i in everything and i not in union})
    first = members[0]
    record_id = stable_id(first.tenant_id, first.user_id, MemoryType.SEMANTIC.value, topic, *sorted(union))
    return sorted(union.values(), key=lambda r: r.id), record_id


# --- one user's pass -------------------------------------------------------------


def plan_user(
    records: Sequence[MemoryRecord],
    vectors: dict[str, Vector | None],
    taken: set[str],
    now: datetime,
    rules: Rules,
    members_by_id: dict[str, MemoryRecord] | None = None,
) -> tuple[list[Effect], Counter[str]]:
    """Every change of one pass over one user's active `records`.

    `taken` holds the ids of the user's existing pattern and semantic rows in
    any status: a planned id among them was already written (the pass is a
    re-run) and is not written again. `members_by_id` resolves a previous
    semantic version's members that are no longer active (default: none).
    """
    plan = Plan(original={r.id: r for r in records})
    plan.vectors.update(vectors)
    for record in records:
        if (changed := decay(record, now, rules)) is not None:
            plan.touch(changed, "decayed", f"decay: unaccessed for {rules.decay_after.days} days")
    for record in list(plan.active()):
        if (changed := prune(record, now, rules)) is not None:
            plan.touch(
                changed,
                "pruned",
                f"prune: importance below {rules.prune_below} and unaccessed for {rules.prune_after.days} days",
            )
    _patterns(plan, taken, now, rules)
    _semantics(plan, taken, now, rules, members_by_id or {})
    for record in list(plan.active()):
        if (deferred := defer(record, now, rules)) is not None:
            plan.touch(deferred[0], "deferred", deferred[1])
    return _effects(plan), plan.counts


def _episodes(plan: Plan) -> list[MemoryRecord]:
    return sorted((r for r in plan.active() if r.type is MemoryType.EPISODE), key=lambda r: r.id)


def _patterns(plan: Plan, taken: set[str], now: datetime, rules: Rules) -> None:
    candidates = [r for r in _episodes(plan) if not r.compressed and plan.vectors.get(r.id) is not None]
    groups = clusters([plan.vectors[r.id] or [] for r in candidates], rules.pattern_similarity)
    for group in groups:
        if len(group) < rules.pattern_min:
            continue
        members = [candidates[i] for i in group]
        pattern = pattern_of(members, now)
        if pattern.id in taken:
            continue
        plan.vectors[pattern.id] = mean_vector(plan.vectors[r.id] or [] for r in members)
        plan.touch(pattern, "patterns", f"pattern of {len(members)} similar episodes")
        for member in members:
            compressed = plan.current(member.id).model_copy(update={"compressed": True, "updated_at": now})
            plan.touch(compressed, "compressed", f"compressed into pattern {pattern.id}")


def _semantics(plan: Plan, taken: set[str], now: datetime, rules: Rules, inactive: dict[str, MemoryRecord]) -> None:
    active = plan.active()
    previous = {r.key_name: r for r in active if r.type is MemoryType.SEMANTIC and r.key_name}
    everything = {**inactive, **{r.id: r for r in active}}
    for topic, members in topics(_episodes(plan), rules.semantic_window).items():
        old = previous.get(topic)
        planned = semantic_of(topic, members, old, everything)
        if planned is None or planned[1] in taken:
            continue
        union, record_id = planned
        with_vectors = [v for r in union if (v := plan.vectors.get(r.id)) is not None]
        if not with_vectors:
            continue  # nothing to index it by: better absent than active and unfindable
        record = synthesized(record_id, MemoryType.SEMANTIC, semantic_text(topic, union), topic, union, now)
        plan.vectors[record.id] = mean_vector(with_vectors)
        plan.touch(record, "semantic", f"topic '{topic}' across {len({r.source.session_id for r in union})} sessions")
        if old is not None:
            superseded = plan.current(old.id).model_copy(
                update={
                    "status": MemoryStatus.SUPERSEDED,
                    "superseded_at": now,
                    "superseded_by": record.id,
                    "updated_at": now,
                }
            )
            plan.touch(superseded, "semantic_superseded", f"topic '{topic}' has a new version {record.id}")


def _effects(plan: Plan) -> list[Effect]:
    effects = []
    for record_id, state in plan.state.items():
        before = plan.original.get(record_id)
        record = state if before is None else state.model_copy(update={"version": before.version + 1})
        if before is None:
            op = ChangeOp.ADDED
        elif record.status is MemoryStatus.PRUNED:
            op = ChangeOp.DELETED
        elif record.status is MemoryStatus.SUPERSEDED:
            op = ChangeOp.SUPERSEDED
        else:
            op = ChangeOp.UPDATED
        # Active memories stay in the index (no vector means the sink removes the point). Compressed
        # episodes stay too, flagged in the payload: default recall skips them, `include_compressed` finds them.
        indexed = record.status is MemoryStatus.ACTIVE
        effects.append(
            Effect(record, op, "; ".join(plan.reasons[record_id]), plan.vectors.get(record_id) if indexed else None)
        )
    return effects
