"""embedder: candidates in batches through the model (off the event loop).

An exchange with context (MemoryCandidate.context) gets a second vector, of
its context window (services.stores.vector.dense_context_text), embedded in
the same call as the batch's own texts: one model call per batch.
"""

from __future__ import annotations

import asyncio

import faust

from agents.stage import batched_agent, forward
from agents.topics import Topics
from schemas import EmbeddedCandidate, MemoryCandidate
from services.runtime import Runtime
from services.stores.vector import dense_context_text

STAGE = "embedder"


def texts_to_embed(candidates: list[MemoryCandidate]) -> list[str]:
    """Every candidate's text, then the context text of those with context, in candidate order."""
    return [c.text for c in candidates] + [dense_context_text(c.context, c.text) for c in candidates if c.context]


async def embed_candidates(rt: Runtime, candidates: list[MemoryCandidate]) -> list[EmbeddedCandidate]:
    model = await rt.embedder()
    vectors = await asyncio.to_thread(model.embed, texts_to_embed(candidates))
    own, contexts = vectors[: len(candidates)], iter(vectors[len(candidates) :])
    return [
        EmbeddedCandidate(
            tenant_id=c.tenant_id,
            user_id=c.user_id,
            candidate=c,
            vector=v,
            model=model.name,
            context_vector=next(contexts) if c.context else None,
        )
        for c, v in zip(candidates, own, strict=True)
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
        keys=rt.keys,
        stage=STAGE,
        model=MemoryCandidate,
        size=s.embed_batch_size,
        within=s.embed_batch_within,
        handle=handle,
    )
