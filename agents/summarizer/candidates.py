"""An evicted chunk becomes one episodic memory candidate, extractive or from the LLM.

Both paths give the candidate the same id (tenant, user, the chunk's event
ids): one chunk is one episode whichever path wrote it, so a chunk first
summarized extractively during an LLM outage and replayed later upserts the
same memory instead of adding a second.
"""

from __future__ import annotations

from dataclasses import replace

from agents.summarizer.extractive import Episode, summarize
from schemas import EvictedChunk, MemoryCandidate, MemoryType, Provenance
from services.core.textutil import stable_id
from services.llm import EXTRACTOR as LLM_EXTRACTOR
from services.llm import EpisodeAnswer

EXTRACTOR = "extractive/v1"
__all__ = ["EXTRACTOR", "LLM_EXTRACTOR", "candidate_for", "episode_candidate", "llm_episode"]


def episode_candidate(chunk: EvictedChunk, max_sentences: int) -> MemoryCandidate | None:
    if not chunk.turns:
        return None
    episode = summarize(chunk.turns, max_sentences)
    return None if episode is None else candidate_for(chunk, episode, EXTRACTOR)


def llm_episode(extractive: Episode, answer: EpisodeAnswer) -> Episode:
    """The LLM's text, topics and questions; times and entities stay the deterministic ones."""
    return replace(
        extractive,
        text=answer.summary.strip(),
        topics=[t.strip().lower() for t in answer.topics if t.strip()] or extractive.topics,
        open_questions=[q.strip() for q in answer.open_questions if q.strip()],
    )


def candidate_for(chunk: EvictedChunk, episode: Episode, extractor: str) -> MemoryCandidate:
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
        extractor=extractor,
    )
