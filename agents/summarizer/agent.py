"""summarizer: evicted chunks and session ends become episodic memories.

Extractive by default. With `MEMSTREAM_LLM_BASE_URL` set, the LLM writes the
episode; when it gives nothing usable the extractive episode is written
instead, so a chunk always ends as memory. A bad answer (invalid JSON twice)
is also dead-lettered as `llm_invalid_output`: the chunk's own bytes, the raw
answer in `x-memstream-error`. An LLM outage (timeouts, 429, 5xx after the
client's retries) only falls back: it is not the input's fault.
"""

from __future__ import annotations

from typing import Any

import faust

from agents.dlq import DeadLetters
from agents.questions import question_candidates
from agents.stage import deliver, forward, parse_or_dlq, span
from agents.summarizer.candidates import EXTRACTOR, LLM_EXTRACTOR, candidate_for, llm_episode
from agents.summarizer.extractive import summarize
from agents.topics import Topics
from schemas import EvictedChunk, MemoryCandidate
from services import metrics
from services.llm import Ok, summarize_episode
from services.llm import metrics as llm_metrics
from services.runtime import Runtime

STAGE = "summarizer"
LLM_INVALID_OUTPUT = "llm_invalid_output"
OPERATION = "summarize_episode"


def register(app: faust.App, topics: Topics, rt: Runtime) -> None:
    s = rt.settings
    dlq = DeadLetters(topics.dlq, s.max_message_bytes)
    llm = rt.llm
    if llm is not None:
        metrics.DLQ.labels(stage=STAGE, reason=LLM_INVALID_OUTPUT)
        llm_metrics.declare(OPERATION)

    async def episode_for(event: Any, chunk: EvictedChunk) -> MemoryCandidate | None:
        """The extractive summary also gates the LLM: a chunk of greetings costs no request."""
        extractive = summarize(chunk.turns, s.summary_max_sentences) if chunk.turns else None
        if extractive is None:
            return None
        if llm is None:
            return candidate_for(chunk, extractive, EXTRACTOR)
        outcome = await summarize_episode(llm, chunk.turns)
        if isinstance(outcome, Ok):
            return candidate_for(chunk, llm_episode(extractive, outcome.value), LLM_EXTRACTOR)
        if outcome.dead_letter:
            await dlq.send(event, stage=STAGE, reason=LLM_INVALID_OUTPUT, error=outcome.describe(OPERATION))
        return candidate_for(chunk, extractive, EXTRACTOR)

    async def summarize_chunks(items: list[tuple[Any, EvictedChunk]]) -> None:
        for event, chunk in items:
            candidate = await episode_for(event, chunk)
            episode = [] if candidate is None else [candidate]
            await forward(topics.candidates, STAGE, episode + question_candidates(chunk))

    async def summarizer(stream: Any) -> None:
        async for event in stream.events():
            with span(STAGE, 1):
                parsed = await parse_or_dlq([event], EvictedChunk, dlq, STAGE)
                items = [(ev, (ev, chunk)) for ev, chunk in parsed]
                await deliver(items, summarize_chunks, dlq, STAGE, max_delay=s.retry_max_backoff)

    app.agent(topics.evicted, name="summarizer")(summarizer)
