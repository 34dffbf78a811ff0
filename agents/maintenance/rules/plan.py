"""One maintenance pass over one user's memories: the rules in their order, and the one change per record they make.

Everything here is a function of the records, their vectors and `now`, so the
same inputs always plan the same writes (deterministic ids, no clock reads):
that is what makes a pass idempotent and a re-run after a crash harmless.

Time is the data's own: a memory's age is measured from when it was last seen
in its timeline, `last_seen` = the later of `observed_at` and
`last_accessed_at`, never from `created_at` (when this process happened to
ingest it), and a pass `--now` in the data's past or future means what it says.
Decay alone starts no earlier than the memory's last write (`decay`).

Rules of a pass, in this order, over the user's active memories (each in the
module named in brackets):

1. decay (`decay`): a memory not seen for `decay_after` loses importance by time, not by
   passes: it halves every `decay_half_life` (180 days) unseen, counted from the later of
   the grace's end and the memory's last write (so history imported today starts whole);
   a memory already written by the pass at this `now` is left alone;
2. prune (`decay`): importance (after decay) below `prune_below` and not seen for
   `prune_after` → status `pruned`, op `deleted`, the reason in the change;
3. patterns (`patterns`): average-link agglomerative clusters of the active, uncompressed
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
4. semantic (`topics`): a topic term is a content word of an episode's `category` (its
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
5. questions (`questions`): an `open` question still active after the above moves to
   `deferred` when recall has surfaced it `question_max_surfaced` times
   (its `access_count`: every surfacing is an access mark) or it was asked
   (`observed_at`) more than `question_defer_after` before `now`; `attempts`
   records the surfacings. Deferred is a state, not a status: the question
   stays active (listed, in history), recall stops surfacing it, and a later
   answer still resolves it. A deferred question is never deferred again, so
   a re-run changes nothing.

A pattern's or topic's provenance is its members' union (`synthesized`): every event id, and
their per-turn metadata (where a turn's own ids, e.g. LoCoMo's `dia_id`, live)
bounded as the consolidator bounds any merged provenance (`recent_metadata`),
with the synthesis entry (`memory_ids`, `session_ids`) last so it is always kept.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from agents.maintenance.rules.common import Vector, days
from agents.maintenance.rules.config import Rules
from agents.maintenance.rules.decay import decay, prune
from agents.maintenance.rules.patterns import patterns
from agents.maintenance.rules.questions import defer
from agents.maintenance.rules.state import Plan
from agents.maintenance.rules.topics import semantics
from schemas import ChangeOp, MemoryRecord, MemoryStatus


@dataclass(frozen=True)
class Effect:
    """One record's change of this pass: its final state, with the version bumped once."""

    record: MemoryRecord
    op: ChangeOp
    reason: str
    vector: Vector | None


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
            plan.touch(changed, "decayed", f"decay: not seen for {days(rules.decay_after)}")
    for record in list(plan.active()):
        if (changed := prune(record, now, rules)) is not None:
            plan.touch(
                changed,
                "pruned",
                f"prune: importance below {rules.prune_below} and not seen for {days(rules.prune_after)}",
            )
    patterns(plan, taken, now, rules)
    semantics(plan, taken, now, rules, members_by_id or {})
    for record in list(plan.active()):
        if (deferred := defer(record, now, rules)) is not None:
            plan.touch(deferred[0], "deferred", deferred[1])
    return _effects(plan), plan.counts


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
