"""A preference taken back: "I'm no longer vegetarian" supersedes the user's earlier "I'm vegetarian".

Preferences have no key, so what a retraction takes back is found by its
words (agents.rules.patterns.taken_back): every active preference of the
user, observed before the retraction, whose text holds all of them. Each is
superseded by the retraction, at the retraction's observation, so recall
`as_of` an earlier moment still shows it and a standing preference stops
being pinned. A preference said after the retraction (a history imported
late, or the user changing their mind again) is left as it is. A replay of
the retraction finds nothing left to take back.
"""

from __future__ import annotations

from datetime import datetime

from agents.consolidator.apply.changes import change
from agents.consolidator.apply.context import BatchContext
from agents.rules.patterns import taken_back
from schemas import ChangeOp, EmbeddedCandidate, MemoryChange, MemoryRecord, MemoryStatus, MemoryType
from schemas.memory import RETRACTION
from services.core.textutil import content_words
from services.stores.postgres import Conn, MemoryWriter


def is_retraction(record: MemoryRecord) -> bool:
    return record.type is MemoryType.PREFERENCE and record.category == RETRACTION and bool(record.value)


async def take_back(
    pg: MemoryWriter,
    conn: Conn,
    item: EmbeddedCandidate,
    retraction: MemoryRecord,
    now: datetime,
    ctx: BatchContext | None,
) -> list[MemoryChange]:
    """Supersede what `retraction` takes back; the changes, one per preference."""
    words = taken_back(retraction.value or "")
    out = []
    for old in await pg.active_preferences(conn, retraction.tenant_id, retraction.user_id):
        if old.id == retraction.id or old.category == RETRACTION or old.observed_at > retraction.observed_at:
            continue
        if not words <= set(content_words(old.text)):
            continue
        gone = old.model_copy(
            update={
                "status": MemoryStatus.SUPERSEDED,
                "superseded_at": retraction.observed_at,
                "superseded_by": retraction.id,
                "updated_at": now,
                "version": old.version + 1,
            }
        )
        await pg.upsert(conn, gone, None)
        if ctx is not None:
            ctx.view.wrote(gone, None)
        out.append(change(gone, ChangeOp.SUPERSEDED, item, now, reason=f"taken back: {retraction.text}"))
    return out
