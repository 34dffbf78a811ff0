"""A pass's working state for one user: the records as loaded, the new state of each one a rule touched, and why.

Every rule reads the current state (a record decayed, then pruned, then
compressed is one record with all three reasons) and the pass turns it into
one change per record (plan.plan_user).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from agents.maintenance.rules.common import Vector
from schemas import MemoryRecord, MemoryStatus, MemoryType


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

    def supersede(self, old_id: str, new: MemoryRecord, kind: str, reason: str) -> None:
        """Mark `old_id` superseded by `new`, a synthesized record's next version, as of `new`'s creation."""
        update = {
            "status": MemoryStatus.SUPERSEDED,
            "superseded_at": new.created_at,
            "superseded_by": new.id,
            "updated_at": new.created_at,
        }
        self.touch(self.current(old_id).model_copy(update=update), kind, reason)

    def active(self) -> list[MemoryRecord]:
        ids = list(self.original) + [i for i in self.state if i not in self.original]
        return [r for r in (self.current(i) for i in ids) if r.status is MemoryStatus.ACTIVE]


def active_episodes(plan: Plan) -> list[MemoryRecord]:
    return sorted((r for r in plan.active() if r.type is MemoryType.EPISODE), key=lambda r: r.id)
