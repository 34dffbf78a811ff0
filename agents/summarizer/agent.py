"""summarizer: evicted chunks and session ends become episodic memories."""

from __future__ import annotations

from typing import Any

import faust

from agents.stage import deliver, forward, parse_or_dlq, span
from agents.summarizer.candidates import episode_candidate
from agents.topics import Topics
from schemas import EvictedChunk
from services.runtime import Runtime

STAGE = "summarizer"


def register(app: faust.App, topics: Topics, rt: Runtime) -> None:
    async def summarize(chunks: list[EvictedChunk]) -> None:
        for chunk in chunks:
            candidate = episode_candidate(chunk, rt.settings.summary_max_sentences)
            if candidate is not None:
                await forward(topics.candidates, STAGE, [candidate])

    async def summarizer(stream: Any) -> None:
        async for event in stream.events():
            with span(STAGE, 1):
                await deliver(
                    await parse_or_dlq([event], EvictedChunk, topics.dlq, STAGE), summarize, topics.dlq, STAGE
                )

    app.agent(topics.evicted, name="summarizer")(summarizer)
