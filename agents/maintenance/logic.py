"""Maintenance decisions as pure functions: what one pass does to one user's memories.

Everything here is a function of the records, their vectors and `now`, so the
same inputs always plan the same writes (deterministic ids, no clock reads):
that is what makes a pass idempotent and a re-run after a crash harmless.

Time is the data's own: a memory's age is measured from when it was last seen
in its timeline, `last_seen` = the later of `observed_at` and
`last_accessed_at`, never from `created_at` (when this process happened to
ingest it). So a replay or rebuild of old conversations ages exactly as the
live run did, and a pass `--now` in the data's past or future means what it says.

Rules of a pass, in this order, over the user's active memories:

1. decay: a memory not seen for `decay_after` loses `decay_rate` importance,
   never below 0, once per pass moment (a memory already written by the pass
   at this `now`, `updated_at == now`, is left alone);
2. prune: importance (after decay) below `prune_below` and not seen for
   `prune_after` → status `pruned`, op `deleted`, the reason in the change;
3. patterns: average-link agglomerative clusters of the active, uncompressed
   episodes' vectors: the two clusters whose cross pairs have the highest
   mean cosine merge while that mean is ≥ the user's link threshold, which is
   `pattern_spread` (1.0) standard deviations above the mean cosine of a pair
   of the user's episodes (all of them, compressed too), those pairs pooled
   with `pattern_prior_pairs` (200) pairs of unrelated episodes, so a short
   history leans on what unrelated episodes look like and a long one on its
   own. A cluster of ≥ `pattern_min` (5) episodes becomes one `pattern`
   memory stating the shared terms and its most typical member, and its
   members get `compressed = true` (out of default recall, kept in Postgres
   and the index). Method and values were chosen on a labelled set of
   assistant conversations (tests/bench/patterns.py);
4. semantic: a topic term is a content word of an episode's `category` (its
   summary's most frequent words) that is not a name: entities are not
   topics, and a word the user's episodes give as an entity (capitalised
   mid-sentence) at least twice is a name (a person, a place, an interjection),
   which says who, not what. A term qualifies when the active episodes
   carrying it, counted back `semantic_window` from the latest of them, are
   ≥ `semantic_min_members` (3) from ≥ 2 sessions. Qualifying terms are
   ranked by sessions, then episodes, then how early the episodes list the
   term (their topics come most frequent first), then the term; a term whose
   episodes largely overlap a better-ranked topic's (Jaccard ≥ `topic_overlap`,
   0.5) folds into it (one topic, both terms, the union of members); at most
   `semantic_max_topics` (5) topics per user and pass are kept. One
   `semantic` memory per topic (`key_name` = its best term), superseded by a
   new version only when an episode it does not already cover joins (losing
   members to a prune does not churn it);
5. questions: an `open` question still active after the above moves to
   `deferred` when recall has surfaced it `question_max_surfaced` times
   (its `access_count`: every surfacing is an access mark) or it was asked
   (`observed_at`) more than `question_defer_after` before `now`; `attempts`
   records the surfacings. Deferred is a state, not a status: the question
   stays active (listed, in history), recall stops surfacing it, and a later
   answer still resolves it. A deferred question is never deferred again, so
   a re-run changes nothing.

A pattern's or topic's provenance is its members' union: every event id, and
their per-turn metadata (where a turn's own ids, e.g. LoCoMo's `dia_id`, live)
bounded as the consolidator bounds any merged provenance (`recent_metadata`),
with the synthesis entry (`memory_ids`, `session_ids`) last so it is always kept.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import numpy as np

from agents.consolidator.apply import recent_metadata
from schemas import ChangeOp, MemoryRecord, MemoryStatus, MemoryType, Provenance
from schemas.memory import QuestionState
from services.core.config import Settings
from services.core.textutil import content_hash, content_words, stable_id

PATTERN_SPREAD = 1.0
PATTERN_PRIOR_PAIRS = 200.0
# MiniLM cosines of two unrelated assistant-conversation episodes (the labelled set's half "a", pairs of
# different themes, extractive episodes weighed by corpus counts): what a user's history is measured
# against until it has enough pairs of its own.
PATTERN_PRIOR_MEAN = 0.083
PATTERN_PRIOR_STD = 0.084
SEMANTIC_MIN_MEMBERS = 3
SEMANTIC_MIN_SESSIONS = 2
SEMANTIC_MAX_TOPICS = 5
TOPIC_OVERLAP = 0.5
NAME_MENTIONS = 2
# Similarities are compared at this precision: a re-plan over fewer rows (another matrix shape, other
# floating-point rounding) must see the same ties and thresholds as the pass before it.
SIMILARITY_DECIMALS = 6
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
    pattern_spread: float = PATTERN_SPREAD
    pattern_prior_pairs: float = PATTERN_PRIOR_PAIRS
    question_max_surfaced: int = 3
    question_defer_after: timedelta = timedelta(days=30)
    semantic_min_members: int = SEMANTIC_MIN_MEMBERS
    semantic_max_topics: int = SEMANTIC_MAX_TOPICS
    topic_overlap: float = TOPIC_OVERLAP

    @classmethod
    def from_settings(cls, s: Settings) -> Rules:
        return cls(
            decay_rate=s.decay_rate,
            decay_after=timedelta(days=s.decay_after_days),
            prune_below=s.prune_below,
            prune_after=timedelta(days=s.prune_after_days),
            pattern_min=s.pattern_min_episodes,
            pattern_spread=s.pattern_spread,
            pattern_prior_pairs=s.pattern_prior_pairs,
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


def last_seen(record: MemoryRecord) -> datetime:
    """When the memory was last seen in its own timeline: observed, or recalled since."""
    accessed = record.last_accessed_at
    return accessed if accessed is not None and accessed > record.observed_at else record.observed_at


def decay(record: MemoryRecord, now: datetime, rules: Rules) -> MemoryRecord | None:
    """The record with less importance, or None when this pass leaves it as it is."""
    if record.status is not MemoryStatus.ACTIVE or record.importance <= 0:
        return None
    if now - last_seen(record) < rules.decay_after or record.updated_at == now:
        return None
    importance = max(0.0, round(record.importance - rules.decay_rate, 6))
    if importance >= record.importance:  # a zero rate (or rounding) never raises importance
        return None
    return record.model_copy(update={"importance": importance, "updated_at": now})


def prune(record: MemoryRecord, now: datetime, rules: Rules) -> MemoryRecord | None:
    """The record marked pruned, or None when it is still worth keeping."""
    if record.status is not MemoryStatus.ACTIVE or record.importance >= rules.prune_below:
        return None
    if now - last_seen(record) < rules.prune_after:
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


def similarities(vectors: Sequence[Sequence[float]]) -> np.ndarray:
    """Pairwise cosines, symmetric and rounded (see SIMILARITY_DECIMALS)."""
    m = np.stack([unit(v) for v in vectors])
    sim = m @ m.T
    rounded: np.ndarray = np.round((sim + sim.T) / 2, SIMILARITY_DECIMALS)
    return rounded


def link_threshold(vectors: Sequence[Sequence[float]], rules: Rules) -> float:
    """The mean cosine a group of the user's episodes needs to be one theme: what stands out for this user.

    `pattern_spread` standard deviations above the mean cosine of a pair of
    the user's episodes. How alike two unrelated episodes are depends on the
    user (two friends chatting share names and small talk in every session;
    an assistant's filler recurs in every reply), so one fixed cosine either
    finds nothing or makes a whole history one pattern. The user's pairs are
    pooled with `pattern_prior_pairs` pairs of unrelated episodes as MiniLM
    sees them (PATTERN_PRIOR_MEAN ± PATTERN_PRIOR_STD, measured on the
    labelled set's pairs of different themes): a short history, or one of a
    single theme, has no background of its own to stand out from, and a long
    one outweighs the prior.
    """
    n = len(vectors)
    pairs = similarities(vectors)[np.triu_indices(n, 1)] if n >= 2 else np.zeros(0)
    prior = rules.pattern_prior_pairs
    total = len(pairs) + prior or 1.0  # no pairs and no prior: nothing to cluster anyway
    mean = (float(pairs.sum()) + prior * PATTERN_PRIOR_MEAN) / total
    # The pooled variance: each part's spread plus how far its mean is from the pooled one.
    squares = float(((pairs - mean) ** 2).sum()) + prior * (PATTERN_PRIOR_STD**2 + (PATTERN_PRIOR_MEAN - mean) ** 2)
    return round(mean + rules.pattern_spread * math.sqrt(squares / total), SIMILARITY_DECIMALS)


def clusters(vectors: Sequence[Sequence[float]], threshold: float) -> list[list[int]]:
    """Average-link agglomerative clusters at mean cosine ≥ threshold, as sorted index lists.

    Repeatedly merge the two clusters whose cross pairs have the highest mean
    cosine, while that mean is ≥ threshold: every cluster's pairs are then that
    similar on average, and no two clusters are. Unlike complete link, one
    unlike pair (two steps of one plan worded apart) does not split a theme;
    unlike single link, a cluster does not chain from one subject to another.
    Ties go to the lowest indices, so the result depends on the vectors and
    their order only; and dropping whole clusters from the input leaves the
    others as they were (the link of two clusters depends on their members
    only, so a re-plan after compressing a pattern's members finds nothing new).
    Cost: a scan of the n × n matrix per merge, fine for one user's episodes.
    """
    n = len(vectors)
    if n == 0:
        return []
    sim = similarities(vectors)
    np.fill_diagonal(sim, -np.inf)
    groups = {i: [i] for i in range(n)}
    while True:
        i, j = divmod(int(np.argmax(sim)), n)  # the first maximum: i < j, lowest indices first
        if sim[i, j] < threshold:
            break
        # The merged cluster keeps index i; its link to any other is the size-weighted mean of its parts'.
        a, b = len(groups[i]), len(groups[j])
        sim[i] = np.round((a * sim[i] + b * sim[j]) / (a + b), SIMILARITY_DECIMALS)
        sim[:, i] = sim[i]
        sim[i, i] = -np.inf
        sim[j] = -np.inf
        sim[:, j] = -np.inf
        groups[i] += groups.pop(j)
    return sorted(sorted(g) for g in groups.values())


def ordered_terms(record: MemoryRecord) -> list[str]:
    """An episode's terms: the content words of its `category` (its summary's topics, most frequent first)."""
    return list(dict.fromkeys(content_words(record.category or "")))


def terms_of(record: MemoryRecord) -> set[str]:
    return set(ordered_terms(record))


def names(episodes: Iterable[MemoryRecord]) -> set[str]:
    """Words the episodes give as an entity at least NAME_MENTIONS times, lower-cased: who, not what."""
    mentions = Counter(e for r in episodes for e in {x.lower() for x in r.entities})
    return {e for e, n in mentions.items() if n >= NAME_MENTIONS}


def common_theme(records: Sequence[MemoryRecord]) -> list[str]:
    """Terms carried by at least half of the records, most frequent first (the top 3 if none is)."""
    counts = Counter(t for r in records for t in terms_of(r))
    ranked = sorted(counts, key=lambda t: (-counts[t], t))
    common = [t for t in ranked if counts[t] >= math.ceil(len(records) / 2)]
    return (common or ranked[:3])[:THEME_TERMS]


def union_provenance(members: Sequence[MemoryRecord], synthesis: dict[str, Any]) -> Provenance:
    """Every member's event ids (in observation order, once) and per-turn metadata, the latest member's session.

    The metadata is bounded like any merged provenance (`recent_metadata`: the
    newest entries); the synthesis entry goes last, so it is always among them.
    """
    ordered = sorted(members, key=lambda r: (r.observed_at, r.id))
    event_ids = list(dict.fromkeys(e for r in ordered for e in r.source.event_ids))
    turns = [m for r in ordered for m in r.source.metadata if "synthesized" not in m]
    return Provenance(
        session_id=ordered[-1].source.session_id,
        event_ids=event_ids,
        metadata=recent_metadata([*turns, synthesis]),
    )


def synthesized(
    record_id: str,
    type_: MemoryType,
    text: str,
    category: str | None,
    members: Sequence[MemoryRecord],
    now: datetime,
    key_name: str | None = None,
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
        key_name=key_name,
        importance=SYNTHESIZED_IMPORTANCE,
        confidence=round(sum(r.confidence for r in members) / len(members), 6),
        status=MemoryStatus.ACTIVE,
        observed_at=latest.observed_at,
        created_at=now,
        updated_at=now,
        source=union_provenance(members, {"synthesized": type_.value, "memory_ids": ids, "session_ids": sessions}),
        entities=entities,
    )


def span(members: Sequence[MemoryRecord]) -> str:
    first = min(r.observed_at for r in members).date().isoformat()
    last = max(r.observed_at for r in members).date().isoformat()
    return first if first == last else f"{first} to {last}"


def typical(members: Sequence[MemoryRecord], vectors: Sequence[Sequence[float]]) -> MemoryRecord:
    """The member closest to all the others: the highest mean cosine, the first of `members` on a tie."""
    mean = np.round(similarities(vectors).mean(axis=1), SIMILARITY_DECIMALS)
    return members[int(np.argmax(mean))]


def pattern_text(theme: Sequence[str], members: Sequence[MemoryRecord], example: MemoryRecord) -> str:
    sessions = len({r.source.session_id for r in members})
    about = ", ".join(theme) or "similar conversations"
    return (
        f"Recurring theme across {len(members)} episodes in {sessions} sessions ({span(members)}): {about}. "
        f"Typically: {example.text[:SNIPPET_CHARS]}"
    )


def pattern_of(members: Sequence[MemoryRecord], vectors: Sequence[Sequence[float]], now: datetime) -> MemoryRecord:
    first = members[0]
    record_id = stable_id(first.tenant_id, first.user_id, MemoryType.PATTERN.value, *sorted(r.id for r in members))
    theme = common_theme(members)
    text = pattern_text(theme, members, typical(members, vectors))
    return synthesized(record_id, MemoryType.PATTERN, text, ", ".join(theme[:3]) or None, members, now)


# --- semantic topics -------------------------------------------------------------


@dataclass(frozen=True)
class Topic:
    """A topic with real support: its best-ranked term (the key), the terms folded into it, its episodes."""

    term: str
    terms: tuple[str, ...]
    members: tuple[MemoryRecord, ...]

    @property
    def ids(self) -> set[str]:
        return {r.id for r in self.members}


def sessions_of(records: Iterable[MemoryRecord]) -> int:
    return len({r.source.session_id for r in records})


def supported(carrying: Sequence[MemoryRecord], rules: Rules) -> list[MemoryRecord] | None:
    """The episodes within the window of the latest one, sorted by id, if they are support enough."""
    latest = max(r.observed_at for r in carrying)
    members = sorted((r for r in carrying if r.observed_at >= latest - rules.semantic_window), key=lambda r: r.id)
    if len(members) < rules.semantic_min_members or sessions_of(members) < SEMANTIC_MIN_SESSIONS:
        return None
    return members


def topics(episodes: Sequence[MemoryRecord], rules: Rules) -> list[Topic]:
    """The user's topics, best supported first: qualifying terms, overlapping ones folded, at most the cap."""
    by_term: dict[str, list[MemoryRecord]] = {}
    who = names(episodes)
    for episode in episodes:
        for term in terms_of(episode) - who:
            by_term.setdefault(term, []).append(episode)
    qualifying = [(term, members) for term, carrying in by_term.items() if (members := supported(carrying, rules))]

    def rank(found: tuple[str, list[MemoryRecord]]) -> tuple[int, int, int, str]:
        term, members = found  # ties: the term its episodes list first, then the term itself
        return -sessions_of(members), -len(members), sum(ordered_terms(r).index(term) for r in members), term

    qualifying.sort(key=rank)
    chosen: list[Topic] = []
    for term, members in qualifying:
        ids = {r.id for r in members}
        for k, topic in enumerate(chosen):
            if len(ids & topic.ids) >= rules.topic_overlap * len(ids | topic.ids):
                union = {r.id: r for r in [*topic.members, *members]}
                chosen[k] = Topic(topic.term, (*topic.terms, term), tuple(sorted(union.values(), key=lambda r: r.id)))
                break
        else:
            if len(chosen) < rules.semantic_max_topics:
                chosen.append(Topic(term, (term,), tuple(members)))
    return chosen


def covered(record: MemoryRecord) -> set[str]:
    """The member ids a synthesized record says it was built from."""
    return {i for m in record.source.metadata for i in m.get("memory_ids", [])}


def semantic_text(terms: Sequence[str], members: Sequence[MemoryRecord]) -> str:
    latest = max(members, key=lambda r: (r.observed_at, r.id))
    return (
        f"Recurring topic: {', '.join(terms)}. Discussed in {sessions_of(members)} sessions ({span(members)}). "
        f"Most recently: {latest.text[:SNIPPET_CHARS]}"
    )


def semantic_of(
    topic: Topic, previous: MemoryRecord | None, everything: dict[str, MemoryRecord]
) -> tuple[list[MemoryRecord], str] | None:
    """The members of a new version of the topic's memory and its id, or None if nothing new joined.

    A new version covers the previous version's members too, so its
    provenance is the topic's whole history, not only the latest window.
    """
    known = covered(previous) if previous is not None else set()
    if previous is not None and topic.ids <= known:
        return None
    union = {r.id: r for r in topic.members}
    union.update({i: everything[i] for i in known if i in everything and i not in union})
    first = topic.members[0]
    record_id = stable_id(first.tenant_id, first.user_id, MemoryType.SEMANTIC.value, topic.term, *sorted(union))
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
            plan.touch(changed, "decayed", f"decay: not seen for {_days(rules.decay_after)}")
    for record in list(plan.active()):
        if (changed := prune(record, now, rules)) is not None:
            plan.touch(
                changed,
                "pruned",
                f"prune: importance below {rules.prune_below} and not seen for {_days(rules.prune_after)}",
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
    # The threshold comes from all the user's episodes, compressed ones too: a re-plan sees the same one.
    episodes = [r for r in _episodes(plan) if plan.vectors.get(r.id) is not None]
    threshold = link_threshold([plan.vectors[r.id] or [] for r in episodes], rules)
    candidates = [r for r in episodes if not r.compressed]
    vectors = [plan.vectors[r.id] or [] for r in candidates]
    for group in clusters(vectors, threshold):
        if len(group) < rules.pattern_min:
            continue
        members = [candidates[i] for i in group]
        pattern = pattern_of(members, [vectors[i] for i in group], now)
        if pattern.id in taken:
            continue
        plan.vectors[pattern.id] = mean_vector(vectors[i] for i in group)
        plan.touch(pattern, "patterns", f"pattern of {len(members)} similar episodes")
        for member in members:
            compressed = plan.current(member.id).model_copy(update={"compressed": True, "updated_at": now})
            plan.touch(compressed, "compressed", f"compressed into pattern {pattern.id}")


def _semantics(plan: Plan, taken: set[str], now: datetime, rules: Rules, inactive: dict[str, MemoryRecord]) -> None:
    active = plan.active()
    previous = {r.key_name: r for r in active if r.type is MemoryType.SEMANTIC and r.key_name}
    everything = {**inactive, **{r.id: r for r in active}}
    for topic in topics(_episodes(plan), rules):
        old = previous.get(topic.term)
        planned = semantic_of(topic, old, everything)
        if planned is None or planned[1] in taken:
            continue
        union, record_id = planned
        with_vectors = [v for r in union if (v := plan.vectors.get(r.id)) is not None]
        if not with_vectors:
            continue  # nothing to index it by: better absent than active and unfindable
        text = semantic_text(topic.terms, union)
        record = synthesized(record_id, MemoryType.SEMANTIC, text, ", ".join(topic.terms), union, now, topic.term)
        plan.vectors[record.id] = mean_vector(with_vectors)
        plan.touch(record, "semantic", f"topic '{topic.term}' across {sessions_of(union)} sessions")
        if old is not None:
            superseded = plan.current(old.id).model_copy(
                update={
                    "status": MemoryStatus.SUPERSEDED,
                    "superseded_at": now,
                    "superseded_by": record.id,
                    "updated_at": now,
                }
            )
            plan.touch(superseded, "semantic_superseded", f"topic '{topic.term}' has a new version {record.id}")


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
