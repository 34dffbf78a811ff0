"""summarizer: evicted chunks and session ends become episodic memories."""

from __future__ import annotations

from typing import Any

import faust

from agents.dlq import DeadLetters
from agents.stage import deliver, forward, parse_or_dlq, span
from agents.summarizer.candidates import episode_candidate
from agents.topics import Topics
from schemas import EvictedChunk
from services.runtime import Runtime

STAGE = "summarizer"


def register(app: faust.App, topics: Topics, rt: Runtime) -> None:
    s = rt.settings
    dlq = DeadLetters(topics.dlq, s.max_message_bytes)

    async def summarize(chunks: list[EvictedChunk]) -> None:
        for chunk in chunks:
            candidate = episode_candidate(chunk, s.summary_max_sentences)
            if candidate is not None:
                await forward(topics.candidates, STAGE, [candidate])

    async def summarizer(stream: Any) -> None:
        async for event in stream.events():
            with span(STAGE, 1):
                parsed = await parse_or_dlq([event], EvictedChunk, dlq, STAGE)
                await deliver(parsed, summarize, dlq, STAGE, max_delay=s.retry_max_backoff)

    app.agent(topics.evicted, name="summarizer")(summarizer)
