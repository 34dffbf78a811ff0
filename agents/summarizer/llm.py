"""The summarizer's LLM path: per chunk, the episode and the user's facts, asked concurrently.

Two requests per chunk (LLM paths a and c): `summarize_episode`
writes the episode, `extract_facts` reads the chunk with the session's
rolling summary and answers atomic user-stated facts plus the updated
summary. They do not depend on each other, so they run side by side and a
chunk costs one round trip of latency, not two.

Both answers fall back the same way (`settle`): a bad answer (invalid JSON
twice) dead-letters the chunk's own bytes as `llm_invalid_output` with the
raw output in `x-memstream-error`, an outage only falls back; then the
episode is the extractive one, and the facts are what the rule path already
stored inline when the turns arrived, so nothing is lost either way. Fact
candidates use the rule path's ids, so a fact both paths found is one memory.
"""

from __future__ import annotations

import asyncio
from typing import Any, TypeVar

from agents.dlq import DeadLetters
from agents.summarizer.candidates import EXTRACTOR, LLM_EXTRACTOR, candidate_for, llm_episode
from agents.summarizer.extractive import Episode
from schemas import EvictedChunk, MemoryCandidate
from services.core import metrics
from services.core.metrics import LLM as llm_metrics
from services.llm import LlmClient, Ok, Outcome, extract_facts, fact_candidates, summarize_episode
from services.stores.postgres.summaries import ChunkMark, SummaryStore, basis_for

LLM_INVALID_OUTPUT = "llm_invalid_output"
SUMMARIZE = "summarize_episode"
EXTRACT = "extract_facts"
# Every later request of the session carries the summary: a runaway answer must not grow them all.
MAX_SUMMARY_CHARS = 2000

V = TypeVar("V")


class LlmPath:
    def __init__(self, client: LlmClient, dlq: DeadLetters, summaries: SummaryStore, stage: str) -> None:
        self._client = client
        self._dlq = dlq
        self._summaries = summaries
        self._stage = stage
        metrics.DLQ.labels(stage=stage, reason=LLM_INVALID_OUTPUT)
        for operation in (SUMMARIZE, EXTRACT):
            llm_metrics.declare(operation)

    async def settle(self, event: Any, operation: str, outcome: Outcome[V]) -> V | None:
        """The answer, or None for the fallback path; a bad answer is dead-lettered first, never dropped."""
        if isinstance(outcome, Ok):
            return outcome.value
        if outcome.dead_letter:
            error = outcome.describe(operation)
            await self._dlq.send(event, stage=self._stage, reason=LLM_INVALID_OUTPUT, error=error)
        return None

    async def candidates(self, event: Any, chunk: EvictedChunk, extractive: Episode) -> list[MemoryCandidate]:
        """The chunk's episode (the LLM's or the extractive one) followed by the LLM's fact candidates."""
        mark = ChunkMark.of(chunk.turns)
        key = (chunk.tenant_id, chunk.user_id, chunk.session_id)
        basis = basis_for(await self._summaries.load(*key), mark)
        episode_outcome, facts_outcome = await asyncio.gather(
            summarize_episode(self._client, chunk.turns),
            extract_facts(self._client, chunk.turns, basis.summary),
        )
        episode = await self.settle(event, SUMMARIZE, episode_outcome)
        facts = await self.settle(event, EXTRACT, facts_outcome)
        out = [
            candidate_for(chunk, extractive, EXTRACTOR)
            if episode is None
            else candidate_for(chunk, llm_episode(extractive, episode), LLM_EXTRACTOR)
        ]
        if facts is None:
            return out
        summary = facts.summary.strip()[:MAX_SUMMARY_CHARS]
        # An empty summary keeps the stored one: the model said nothing, which is no reason to forget.
        if basis.store and summary:
            await self._summaries.save(*key, summary, mark)
        return out + fact_candidates(chunk.turns, facts)
