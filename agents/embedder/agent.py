"""embedder: candidates in batches through the model (off the event loop)."""

from __future__ import annotations

import asyncio

import faust

from agents.stage import batched_agent, forward
from agents.topics import Topics
from schemas import EmbeddedCandidate, MemoryCandidate
from services.runtime import Runtime

STAGE = "embedder"


async def embed_candidates(rt: Runtime, candidates: list[MemoryCandidate]) -> list[EmbeddedCandidate]:
    model = await rt.embedder()
    vectors = await asyncio.to_thread(model.embed, [c.text for c in candidates])
    return [
        EmbeddedCandidate(tenant_id=c.tenant_id, user_id=c.user_id, candidate=c, vector=v, model=model.name)
        for c, v in zip(candidates, vectors, strict=True)
    ]


def register(app: faust.App, topics: Topics, rt: Runtime) -> None:
    async def handle(candidates: list[MemoryCandidate]) -> None:
        await forward(topics.embedded, STAGE, await embed_candidates(rt, candidates))

    s = rt.settings
    batched_agent(
        app,
        topics.candidates,
        topics.dlq,
        s,
        stage=STAGE,
        model=MemoryCandidate,
        size=s.embed_batch_size,
        within=s.embed_batch_within,
        handle=handle,
    )
