"""Decay and prune: a memory not seen for a while loses importance, and one worth little and long unseen is pruned.

Importance halves every `decay_half_life` that a memory goes unseen past
`decay_after` (the same half-life recall gives semantic recency). It is a
function of elapsed time, not of the number of passes: passes every 6 hours
and passes once a week fade memory equally, and a pass only applies the time
since the memory's importance was last current.

That moment is the later of two: when the grace ended (`last_seen` +
`decay_after`, where `last_seen` is the memory's own timeline, never when this
process ingested it), and the memory's last write (`updated_at`: a previous
pass, a merge, an import). So history imported today starts at its full
importance instead of being faded (and soon pruned) for the years before it
reached memstream. A write after the pass's moment (a pass `--now` in the
past of a replay) is not a moment the memory was current, so the grace alone
counts.

Only verbatim exchanges and questions are pruned for disuse. What the user
told about themself (facts and preferences: a name, a city, an allergy)
stays true until a new value supersedes it or the user deletes it: a user
back after two months away must not find the assistant has forgotten that
they are allergic to peanuts. Episodes, patterns and topics are the user's
history in its compact form, one per stretch of conversation, and what a
user back after a year asks about ("what did we plan last spring?"); a
pruned pattern would also leave its compressed episodes out of recall. An
exchange is the verbatim turn whose gist its session's episode keeps. Every
type still decays, so what was said long ago ranks lower.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta

from agents.maintenance.rules.config import Rules
from schemas import MemoryRecord, MemoryStatus, MemoryType

# The types pruned once faded and long unseen; every other is kept until superseded or deleted.
PRUNABLE = frozenset({MemoryType.EXCHANGE, MemoryType.QUESTION})


def last_seen(record: MemoryRecord) -> datetime:
    """When the memory was last seen in its own timeline: observed, or recalled since."""
    accessed = record.last_accessed_at
    return accessed if accessed is not None and accessed > record.observed_at else record.observed_at


def faded(importance: float, unseen: timedelta, half_life: timedelta) -> float:
    """`importance` after `unseen` of decay at `half_life` (rounded as stored)."""
    halvings: float = max(unseen, timedelta(0)) / half_life
    return round(importance * math.pow(0.5, halvings), 6)


def decay(record: MemoryRecord, now: datetime, rules: Rules) -> MemoryRecord | None:
    """The record with less importance, or None when this pass leaves it as it is."""
    if record.status is not MemoryStatus.ACTIVE or record.importance <= 0:
        return None
    since = last_seen(record) + rules.decay_after
    if since <= record.updated_at <= now:
        since = record.updated_at
    if since >= now:
        return None
    importance = faded(record.importance, now - since, rules.decay_half_life)
    if importance >= record.importance:  # too little time to show in six decimals
        return None
    return record.model_copy(update={"importance": importance, "updated_at": now})


def prune(record: MemoryRecord, now: datetime, rules: Rules) -> MemoryRecord | None:
    """The record marked pruned, or None when it is still worth keeping."""
    if record.status is not MemoryStatus.ACTIVE or record.importance >= rules.prune_below:
        return None
    if record.type not in PRUNABLE:
        return None
    if now - last_seen(record) < rules.prune_after:
        return None
    return record.model_copy(update={"status": MemoryStatus.PRUNED, "updated_at": now})
