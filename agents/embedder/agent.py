"""embedder: candidates in batches through the model (off the event loop), fresh ones first.

An exchange with context (MemoryCandidate.context) gets a second vector, of
its context window (services.stores.vector.dense_context_text), embedded in
the same call as the batch's own texts: one model call per batch. Derived
candidates (episodes, questions) wait in a lane of their own behind what
users just said (agents/embedder/lanes.py).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import faust

from agents.dlq import DeadLetters
from agents.embedder.lanes import BackgroundLane, Item
from agents.stage import consume_batches, deliver, forward, parse_or_dlq, span
from agents.topics import Topics
from schemas import EmbeddedCandidate, MemoryCandidate
from services.core import metrics, tracing
from services.core.faults import crash_point
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
    s = rt.settings
    metrics.DLQ.labels(stage=STAGE, reason="schema_violation")
    dlq = DeadLetters(topics.dlq, s.max_message_bytes, rt.keys, max_delay=s.retry_max_backoff)

    async def handle(candidates: list[MemoryCandidate]) -> None:
        await forward(topics.embedded, STAGE, await embed_candidates(rt, candidates))

    async def delivered(items: list[Item]) -> None:
        await deliver(items, handle, dlq, STAGE, max_delay=s.retry_max_backoff)

    async def embedder(stream: Any) -> None:
        lane = BackgroundLane(
            delivered,
            stage=STAGE,
            capacity=s.embed_background_queue,
            batch=s.embed_background_batch,
            max_delay=s.retry_max_backoff,
            on_forwarded=lambda: crash_point(s, "embedder.after_background_forward"),
        )

        async def process(events: list[Any]) -> None:
            with span(STAGE, len(events)), tracing.batch_span(STAGE, events):
                fresh, later = lane.split(await parse_or_dlq(events, MemoryCandidate, dlq, STAGE))
                if fresh:
                    with lane.fresh():
                        await delivered(fresh)
                await lane.put(later)

        background = asyncio.create_task(lane.run(), name="embedder-background-lane")
        try:
            await consume_batches(
                stream, s.embed_batch_size, s.embed_batch_within, process, stage=STAGE, max_delay=s.retry_max_backoff
            )
        finally:
            background.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await background

    app.agent(topics.candidates, name=STAGE)(embedder)
