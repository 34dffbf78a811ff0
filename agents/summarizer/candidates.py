"""An evicted chunk becomes one episodic memory candidate."""

from __future__ import annotations

from agents.summarizer.extractive import summarize
from schemas import EvictedChunk, MemoryCandidate, MemoryType, Provenance
from services.textutil import stable_id

EXTRACTOR = "extractive/v1"


def episode_candidate(chunk: EvictedChunk, max_sentences: int) -> MemoryCandidate | None:
    if not chunk.turns:
        return None
    episode = summarize(chunk.turns, max_sentences)
    if episode is None:
        return None
    event_ids = [t.event_id for t in chunk.turns]
    return MemoryCandidate(
        candidate_id=stable_id(chunk.tenant_id, chunk.user_id, MemoryType.EPISODE.value, *event_ids),
        tenant_id=chunk.tenant_id,
        user_id=chunk.user_id,
        type=MemoryType.EPISODE,
        text=episode.text,
        category=", ".join(episode.topics[:3]) or None,
        importance=0.5,
        confidence=0.7,
        observed_at=episode.ended_at,
        entities=episode.entities,
        source=Provenance(session_id=chunk.session_id, event_ids=event_ids, metadata=[t.metadata for t in chunk.turns]),
        extractor=EXTRACTOR,
    )
