"""summarizer: evicted chunks and session ends become episodic memories (and, with an LLM, facts).

Extractive by default. With `MEMSTREAM_LLM_BASE_URL` set, the LLM writes the
episode and extracts the user's facts with a rolling per-session summary
(`agents/summarizer/llm.py`); when it gives nothing usable the extractive
episode is written instead, so a chunk always ends as memory. A bad answer
(invalid JSON twice) is also dead-lettered as `llm_invalid_output`: the
chunk's own bytes, the raw answer in `x-memstream-error`. An LLM outage
(timeouts, 429, 5xx after the client's retries) only falls back: it is not
the input's fault.
"""

from __future__ import annotations

import asyncio
from typing import Any

import faust

from agents.corpus import lookup_buckets
from agents.dlq import DeadLetters
from agents.questions import question_candidates
from agents.stage import consume_batches, deliver, forward, parse_or_dlq, span
from agents.summarizer.candidates import EXTRACTOR, candidate_for
from agents.summarizer.extractive import summarize
from agents.summarizer.llm import LLM_INVALID_OUTPUT, LlmPath
from agents.summarizer.salience import Salience
from agents.topics import Topics
from schemas import EvictedChunk, MemoryCandidate
from services.core import tracing
from services.core.backlog import BACKGROUND
from services.runtime import Runtime

STAGE = "summarizer"
__all__ = ["LLM_INVALID_OUTPUT", "STAGE", "register"]


async def salience_by_tenant(rt: Runtime, chunks: list[EvictedChunk]) -> dict[str, Salience]:
    """The corpus counts a batch's summaries need: one query per tenant, only the buckets its chunks name."""
    wanted: dict[str, set[int]] = {}
    for chunk in chunks:
        # Hashing every word of up to a message's worth of text: off the event loop the read service shares.
        wanted.setdefault(chunk.tenant_id, set()).update(await asyncio.to_thread(lookup_buckets, chunk.turns))
    return {tenant: Salience(await rt.corpus.counts(tenant, buckets)) for tenant, buckets in wanted.items()}


def register(app: faust.App, topics: Topics, rt: Runtime) -> None:
    s = rt.settings
    dlq = DeadLetters(topics.dlq, s.max_message_bytes, rt.keys)
    llm = None if rt.llm is None else LlmPath(rt.llm, dlq, rt.summaries, STAGE)

    async def memories_for(event: Any, chunk: EvictedChunk, salience: Salience) -> list[MemoryCandidate]:
        """The extractive summary also gates the LLM: a chunk of greetings costs no request."""
        # CPU work over up to a message's worth of text: a worker thread keeps the shared event loop answering.
        extractive = (
            await asyncio.to_thread(summarize, chunk.turns, s.summary_max_sentences, salience) if chunk.turns else None
        )
        if extractive is None:
            return []
        if llm is None:
            return [candidate_for(chunk, extractive, EXTRACTOR)]
        return await llm.candidates(event, chunk, extractive)

    async def summarize_chunks(items: list[tuple[Any, EvictedChunk]]) -> None:
        candidates: list[MemoryCandidate] = []
        saliences = await salience_by_tenant(rt, [chunk for _, chunk in items])
        for event, chunk in items:
            candidates += await memories_for(event, chunk, saliences[chunk.tenant_id])
            candidates += await asyncio.to_thread(question_candidates, chunk, saliences[chunk.tenant_id].formula)
        # Derived work: the embedder takes it after what users just said (agents/embedder/lanes.py).
        await forward(topics.candidates, STAGE, candidates, [BACKGROUND])

    async def summarize_one(events: list[Any]) -> None:
        with span(STAGE, len(events)), tracing.batch_span(STAGE, events):
            parsed = await parse_or_dlq(events, EvictedChunk, dlq, STAGE)
            items = [(ev, (ev, chunk)) for ev, chunk in parsed]
            await deliver(items, summarize_chunks, dlq, STAGE, max_delay=s.retry_max_backoff)

    # Chunks come in bursts (sessions trimmed together, session ends): a batch of them is one send. With an
    # LLM each chunk is a request of seconds, so a chunk's episode is not held up by the rest of a batch.
    size = 1 if llm is not None else s.summarize_batch_size

    async def summarizer(stream: Any) -> None:
        # A batch is acknowledged once its episodes are on memory.candidates.
        await consume_batches(
            stream, size, s.summarize_batch_within, summarize_one, stage=STAGE, max_delay=s.retry_max_backoff
        )

    app.agent(topics.evicted, name="summarizer")(summarizer)
