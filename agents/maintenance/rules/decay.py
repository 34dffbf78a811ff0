"""Decay and prune: a memory not seen for a while loses importance, and one worth little and long unseen is pruned.

Age is measured from when the memory was last seen in its own timeline
(`last_seen`), never from when this process ingested it.

What the user told about themself (facts and preferences: a name, a city,
an allergy) is never pruned for disuse. It stays true until a new value
supersedes it or the user deletes it: a user back after two months away
must not find the assistant has forgotten that they are allergic to
peanuts. It still decays, so what was said long ago ranks a little lower.
"""

from __future__ import annotations

from datetime import datetime

from agents.maintenance.rules.config import Rules
from schemas import MemoryRecord, MemoryStatus, MemoryType

# Kept until superseded or deleted, however long unseen.
NEVER_PRUNED = frozenset({MemoryType.FACT, MemoryType.PREFERENCE})


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
    if record.type in NEVER_PRUNED:
        return None
    if now - last_seen(record) < rules.prune_after:
        return None
    return record.model_copy(update={"status": MemoryStatus.PRUNED, "updated_at": now})
