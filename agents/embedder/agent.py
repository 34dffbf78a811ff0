"""embedder: candidates in batches through the model (off the event loop)."""

from __future__ import annotations

import asyncio
from typing import Any

import faust

from agents.runtime import Runtime, Topics
from agents.stage import forward, parse_or_dlq, span
from schemas import EmbeddedCandidate, MemoryCandidate

STAGE = "embedder"


async def embed_candidates(rt: Runtime, candidates: list[MemoryCandidate]) -> list[EmbeddedCandidate]:
    model = await rt.embedder()
    vectors = await asyncio.to_thread(model.embed, [c.text for c in candidates])
    return [
        EmbeddedCandidate(tenant_id=c.tenant_id, user_id=c.user_id, candidate=c, vector=v, model=model.name)
        for c, v in zip(candidates, vectors, strict=True)
    ]


def register(app: faust.App, topics: Topics, rt: Runtime) -> None:
    s = rt.settings

    async def embedder(stream: Any) -> None:
        async for events in stream.take_events(s.embed_batch_size, within=s.embed_batch_within):
            with span(STAGE, len(events)):
                candidates = await parse_or_dlq(events, MemoryCandidate, topics.dlq, STAGE)
                if candidates:
                    await forward(topics.embedded, STAGE, await embed_candidates(rt, candidates))

    app.agent(topics.candidates, name="embedder")(embedder)
