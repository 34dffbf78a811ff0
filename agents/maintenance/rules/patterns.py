"""Patterns: episodes of one theme become one `pattern` memory, and its members are compressed.

Average-link agglomerative clusters of the active, uncompressed episodes'
vectors, linked while their mean cosine stands out from the user's own
background (`link_threshold`); a cluster of at least `pattern_min` episodes
is a pattern stating the shared terms and its most typical member. Members
get `compressed = true`: out of default recall, kept in Postgres and the
index. An existing pattern's members are one cluster again in the next pass,
so episodes of a theme the user keeps coming back to join it, as a new
version that supersedes it, rather than start a second pattern of the theme. Method and values were chosen on a labelled set of assistant
conversations (tests/bench/patterns.py).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from datetime import datetime
from itertools import combinations

import numpy as np

from agents.maintenance.rules.common import (
    SIMILARITY_DECIMALS,
    mean_vector,
    similarities,
    snippet,
    span,
    terms_of,
)
from agents.maintenance.rules.config import Rules
from agents.maintenance.rules.state import Plan, active_episodes
from agents.maintenance.rules.synthesized import covered, synthesized
from schemas import MemoryRecord, MemoryType
from services.core.textutil import stable_id

# MiniLM cosines of two unrelated assistant-conversation episodes (the labelled set's half "a", pairs of
# different themes, extractive episodes weighed by corpus counts): what a user's history is measured
# against until it has enough pairs of its own.
PATTERN_PRIOR_MEAN = 0.083
PATTERN_PRIOR_STD = 0.084
THEME_TERMS = 5


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


def clusters(
    vectors: Sequence[Sequence[float]], threshold: float, anchors: Sequence[Sequence[int]] = ()
) -> list[list[int]]:
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
    `anchors` are clusters found before (an existing pattern's members, in
    disjoint groups): each starts as one cluster, others may join it, and no
    two anchors merge. Cost: a scan of the n × n matrix per merge, fine for
    one user's episodes.
    """
    n = len(vectors)
    if n == 0:
        return []
    sim = similarities(vectors)
    np.fill_diagonal(sim, -np.inf)
    groups = {i: [i] for i in range(n)}

    def merge(i: int, j: int) -> None:
        # The merged cluster keeps index i; its link to any other is the size-weighted mean of its parts'.
        a, b = len(groups[i]), len(groups[j])
        sim[i] = np.round((a * sim[i] + b * sim[j]) / (a + b), SIMILARITY_DECIMALS)
        sim[:, i] = sim[i]
        sim[i, i] = -np.inf
        sim[j] = -np.inf
        sim[:, j] = -np.inf
        groups[i] += groups.pop(j)

    heads: list[int] = []
    for anchor in anchors:
        head, *rest = sorted(anchor)
        for j in rest:
            merge(head, j)
        heads.append(head)
    for h, k in combinations(heads, 2):
        sim[h, k] = sim[k, h] = -np.inf  # stays -inf through every later merge: a mean with -inf is -inf
    while True:
        i, j = divmod(int(np.argmax(sim)), n)  # the first maximum: i < j, lowest indices first
        if sim[i, j] < threshold:
            break
        merge(i, j)
    return sorted(sorted(g) for g in groups.values())


def common_theme(records: Sequence[MemoryRecord]) -> list[str]:
    """Terms carried by at least half of the records, most frequent first (the top 3 if none is)."""
    counts = Counter(t for r in records for t in terms_of(r))
    ranked = sorted(counts, key=lambda t: (-counts[t], t))
    common = [t for t in ranked if counts[t] >= math.ceil(len(records) / 2)]
    return (common or ranked[:3])[:THEME_TERMS]


def typical(members: Sequence[MemoryRecord], vectors: Sequence[Sequence[float]]) -> MemoryRecord:
    """The member closest to all the others: the highest mean cosine, the first of `members` on a tie."""
    mean = np.round(similarities(vectors).mean(axis=1), SIMILARITY_DECIMALS)
    return members[int(np.argmax(mean))]


def pattern_text(theme: Sequence[str], members: Sequence[MemoryRecord], example: MemoryRecord) -> str:
    sessions = len({r.source.session_id for r in members})
    about = ", ".join(theme) or "similar conversations"
    return (
        f"Recurring theme across {len(members)} episodes in {sessions} sessions ({span(members)}): {about}. "
        f"Typically: {snippet(example)}"
    )


def pattern_of(members: Sequence[MemoryRecord], vectors: Sequence[Sequence[float]], now: datetime) -> MemoryRecord:
    first = members[0]
    record_id = stable_id(first.tenant_id, first.user_id, MemoryType.PATTERN.value, *sorted(r.id for r in members))
    theme = common_theme(members)
    text = pattern_text(theme, members, typical(members, vectors))
    return synthesized(record_id, MemoryType.PATTERN, text, ", ".join(theme[:3]) or None, members, now)


def patterns(plan: Plan, taken: set[str], now: datetime, rules: Rules) -> None:
    """New patterns, and existing ones grown by the episodes that have joined their theme since.

    An existing pattern is its members' cluster again (an anchor): a theme the
    user keeps coming back to is one pattern whose versions grow, not a new
    pattern of the same theme every few sessions.
    """
    # The threshold comes from all the user's episodes, compressed ones too: a re-plan sees the same one.
    episodes = [r for r in active_episodes(plan) if plan.vectors.get(r.id) is not None]
    threshold = link_threshold([plan.vectors[r.id] or [] for r in episodes], rules)
    existing = sorted((r for r in plan.active() if r.type is MemoryType.PATTERN), key=lambda r: r.id)
    ids = {r.id for r in episodes}
    owner: dict[str, MemoryRecord] = {}  # an episode's pattern, the first to cover it
    for earlier in existing:
        for member in sorted(covered(earlier)):
            if member in ids:
                owner.setdefault(member, earlier)
    candidates = [r for r in episodes if not r.compressed or r.id in owner]
    vectors = [plan.vectors[r.id] or [] for r in candidates]
    anchors: dict[str, list[int]] = {}
    for k, r in enumerate(candidates):
        if r.id in owner:
            anchors.setdefault(owner[r.id].id, []).append(k)
    for group in clusters(vectors, threshold, list(anchors.values())):
        members = [candidates[i] for i in group]
        grown = next((owner[r.id] for r in members if r.id in owner), None)
        joining = [r for r in members if r.id not in owner]
        if not joining or (grown is None and len(members) < rules.pattern_min):
            continue
        pattern = pattern_of(members, [vectors[i] for i in group], now)
        if pattern.id in taken:
            continue
        plan.vectors[pattern.id] = mean_vector(vectors[i] for i in group)
        if grown is None:
            plan.touch(pattern, "patterns", f"pattern of {len(members)} similar episodes")
        else:
            plan.touch(pattern, "patterns", f"pattern {grown.id} grown by {len(joining)} episodes")
            plan.supersede(grown.id, pattern, "pattern_superseded", f"pattern has a new version {pattern.id}")
        for episode in joining:
            compressed = plan.current(episode.id).model_copy(update={"compressed": True, "updated_at": now})
            plan.touch(compressed, "compressed", f"compressed into pattern {pattern.id}")
