"""What a memory command does to memory: pure, so every rule is testable without Kafka or Postgres.

The commands stage (agents.consolidator.commands) looks up the rows, embeds the
new text, calls these functions and writes what they return. The rules the
read service applies before producing (new ids, which memories a topic
takes, how a document is cut into parts) are in services.core, below both.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from agents.provenance import recent_metadata
from schemas import ChangeOp, EmbeddedCandidate, MemoryCandidate, MemoryChange, MemoryRecord, MemoryStatus, Provenance
from schemas.commands import MANUAL_SOURCE, AddMemory, CorrectMemory, ImportPart
from schemas.export import ExportedSession, ExportedTurn
from services.archive.codec import DataKey
from services.core.terms import entities as entities_in
from services.core.textutil import content_hash, stable_id

EXTRACTOR = "manual"
# A memory a command wrote carries its own vector only while it is active (the sink indexes those).
RETIRED_OPS: dict[MemoryStatus, ChangeOp] = {
    MemoryStatus.SUPERSEDED: ChangeOp.SUPERSEDED,
    MemoryStatus.MERGED: ChangeOp.MERGED,
    MemoryStatus.PRUNED: ChangeOp.DELETED,
    MemoryStatus.DELETED: ChangeOp.DELETED,
}


def manual_entry(command_id: str, at: datetime, **extra: str) -> dict[str, Any]:
    """The provenance metadata entry that says a person, not a conversation, wrote this version."""
    return {"source": MANUAL_SOURCE, "command_id": command_id, "at": at.isoformat(), **extra}


def add_candidate(cmd: AddMemory, vector: list[float], model: str) -> EmbeddedCandidate:
    """A manual memory as a candidate, so the consolidator's own rules decide it (repeat, new fact value, add).

    Its source events are the command id: a redelivered command finds its
    memory already holding them and changes nothing.
    """
    found = entities_in(cmd.text)
    candidate = MemoryCandidate(
        tenant_id=cmd.tenant_id,
        user_id=cmd.user_id,
        candidate_id=cmd.memory_id,
        type=cmd.type,
        text=cmd.text,
        category=cmd.category,
        key_name=cmd.key_name,
        value=cmd.value,
        importance=cmd.importance,
        confidence=1.0,
        observed_at=cmd.at,
        entities=list(dict.fromkeys([*cmd.entities, *found])),
        source=Provenance(
            session_id=cmd.session_id,
            event_ids=[cmd.command_id],
            metadata=[manual_entry(cmd.command_id, cmd.at)],
        ),
        extractor=EXTRACTOR,
    )
    return EmbeddedCandidate(
        tenant_id=cmd.tenant_id, user_id=cmd.user_id, candidate=candidate, vector=vector, model=model
    )


def retire(
    record: MemoryRecord, status: MemoryStatus, at: datetime, now: datetime, by: str | None = None
) -> MemoryRecord:
    """Out of recall and the index, kept as history: superseded by `by`, or deleted.

    At `at`, or at the record's observation if that is later: nothing ends before it began.
    """
    return record.model_copy(
        update={
            "status": status,
            "superseded_at": max(at, record.observed_at),
            "superseded_by": by,
            "updated_at": now,
            "version": record.version + 1,
        }
    )


def corrected(old: MemoryRecord, cmd: CorrectMemory, now: datetime) -> tuple[MemoryRecord, MemoryRecord]:
    """(old version, new version): the new text under a new id, the old one superseded by it.

    The new version keeps what the memory was (type, key, provenance,
    importance, access) and is observed at the correction; its provenance
    says who corrected it, so history shows both texts and why.

    A correction's time is the command's `at` (when the person asked: in
    practice now), never earlier than the version it corrects: an explicit
    act on what memory holds now, so it always becomes the current value,
    and a late-arriving older statement of the key lands before it, as
    history (agents/consolidator/decide.py). It has no
    context (MemoryRecord.context): the corrected words are the user's, not
    what was said after the turns before the original, and recall finds
    them through their own text.
    """
    source = old.source.model_copy(
        update={
            "metadata": recent_metadata([*old.source.metadata, manual_entry(cmd.command_id, cmd.at, corrects=old.id)])
        }
    )
    at = max(cmd.at, old.observed_at)
    new = old.model_copy(
        update={
            "id": cmd.new_id,
            "text": cmd.text,
            "content_hash": content_hash(cmd.text),
            "value": old.value if cmd.value is None else cmd.value,
            "status": MemoryStatus.ACTIVE,
            "observed_at": at,
            "created_at": now,
            "updated_at": now,
            "superseded_at": None,
            "superseded_by": None,
            "source": source,
            "entities": list(dict.fromkeys([*old.entities, *entities_in(cmd.text)])),
            "version": 1,
            "context": [],
        }
    )
    return retire(old, MemoryStatus.SUPERSEDED, at, now, by=new.id), new


def change(
    record: MemoryRecord,
    op: ChangeOp,
    vector: list[float] | None,
    cause: list[str],
    now: datetime,
    reason: str | None = None,
) -> MemoryChange:
    """Only an active record keeps its vector: any other status takes the point out of the index."""
    return MemoryChange(
        tenant_id=record.tenant_id,
        user_id=record.user_id,
        op=op,
        record=record,
        vector=vector if record.status is MemoryStatus.ACTIVE else None,
        cause=cause,
        committed_at=now,
        reason=reason,
    )


def outcome(changes: Sequence[MemoryChange]) -> list[dict[str, Any]]:
    """What a command changed, as the read service checks it against the index (`?wait=true`)."""
    latest = {c.record.id: c for c in changes}
    return [
        {
            "id": c.record.id,
            "op": c.op.value,
            "status": c.record.status.value,
            "version": c.record.version,
            "indexed": c.record.status is MemoryStatus.ACTIVE and c.vector is not None,
        }
        for c in latest.values()
    ]


# --- import -------------------------------------------------------------------------


def imported_id(key: DataKey, doc_id: str) -> str:
    """The id a document's memory gets in the importing user: derived from its document id under their key.

    Never the document's own id, whoever holds it: ids are global (the index's
    point ids), so keeping them would let an importer write rows under ids of
    another tenant's memories, or learn which ids exist by watching which ones
    were kept. Derived, so importing the same document into the same user
    again (a redelivered part, a retried import) writes the same rows; keyed,
    so once the user is forgotten no id on memory.changes links back to the
    document.
    """
    return key.memory_id(stable_id("import", key.tenant_id, key.user_id, doc_id))


@dataclass(frozen=True)
class Imported:
    record: MemoryRecord
    # The document's id, kept as the row's export id: exporting the copy gives the document's ids back.
    doc_id: str
    # The document's vector when the part's model is ours; None: embed the text.
    vector: list[float] | None


def imported_memories(part: ImportPart, model: str, key: DataKey) -> list[Imported]:
    """The part's memories under the command's tenant and user (`key` is that user's), ids and history links mapped.

    Retired rows first: a new version never meets its predecessor's active
    row in the unique active-fact index.
    """
    if key.owner != (part.tenant_id, part.user_id):
        raise ValueError("an import's ids are derived under the importing user's own key")
    keep_vectors = part.embedding_model == model
    out: list[Imported] = []
    for r in part.memories:
        by = None if r.superseded_by is None else imported_id(key, r.superseded_by)
        record = r.model_copy(
            update={
                "id": imported_id(key, r.id),
                "tenant_id": part.tenant_id,
                "user_id": part.user_id,
                "superseded_by": by,
            }
        )
        out.append(Imported(record, r.id, part.vectors.get(r.id) if keep_vectors else None))
    return sorted(out, key=lambda i: i.record.status is MemoryStatus.ACTIVE)


def imported_turns(part: ImportPart) -> list[ExportedTurn]:
    return [t.model_copy(update={"tenant_id": part.tenant_id, "user_id": part.user_id}) for t in part.turns]


def imported_sessions(part: ImportPart) -> list[ExportedSession]:
    return [
        s.model_copy(
            update={
                "window_turns": [
                    t.model_copy(update={"tenant_id": part.tenant_id, "user_id": part.user_id}) for t in s.window_turns
                ]
            }
        )
        for s in part.sessions
    ]


def import_op(record: MemoryRecord) -> ChangeOp:
    return RETIRED_OPS.get(record.status, ChangeOp.ADDED)
