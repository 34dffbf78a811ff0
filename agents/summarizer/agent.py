"""summarizer: evicted chunks and session ends become episodic memories."""

from __future__ import annotations

from typing import Any

import faust

from agents.runtime import Runtime, Topics
from agents.stage import forward, parse_or_dlq, span
from agents.summarizer.candidates import episode_candidate
from schemas import EvictedChunk

STAGE = "summarizer"


def register(app: faust.App, topics: Topics, rt: Runtime) -> None:
    async def summarizer(stream: Any) -> None:
        async for event in stream.events():
            with span(STAGE, 1):
                for chunk in await parse_or_dlq([event], EvictedChunk, topics.dlq, STAGE):
                    candidate = episode_candidate(chunk, rt.settings.summary_max_sentences)
                    if candidate is not None:
                        await forward(topics.candidates, STAGE, [candidate])

    app.agent(topics.evicted, name="summarizer")(summarizer)
