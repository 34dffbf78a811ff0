"""The optional LLM verdict on a candidate: ADD, UPDATE, DELETE or NONE over its nearest active memories.

Asked before the batch's transaction, never inside it: a model round trip
(seconds, with retries) must not hold row locks or a pooled connection.
The verdict is then applied in the transaction with what memory holds by
then, and the deterministic checks keep the last word where they are
certain: an exact duplicate or a redelivery is never sent to the model, a
keyed fact with an active value of its key is superseded by the rule (the
unique active-fact index allows one), and a target that is no longer active
falls back to the rule path. A model that answers badly twice is
dead-lettered as `llm_invalid_output` (the candidate's own bytes) and the
candidate takes the rule path: never a silent drop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

from agents.dlq import DeadLetters
from schemas import EmbeddedCandidate, MemoryRecord, MemoryType, codec
from services.core.metrics import LLM as llm_metrics
from services.core.textutil import content_hash
from services.llm import Action as LlmAction
from services.llm import LlmClient, Ok, decide
from services.runtime import Runtime
from services.stores.postgres.memory_writes import Nearby, Probe

OPERATION = "decide"
LLM_INVALID_OUTPUT = "llm_invalid_output"
# What the user states about themselves; exchanges and episodes record what was said and are never rewritten.
DECIDED_TYPES = frozenset({MemoryType.FACT, MemoryType.PREFERENCE})
NEIGHBOURS = 5


@dataclass(frozen=True)
class Verdict:
    action: LlmAction
    target_id: str | None
    reason: str

    def describe(self) -> str:
        return f"llm {self.action.value}: {self.reason}"[:500]


def worth_asking(item: EmbeddedCandidate, near: Sequence[Nearby], min_similarity: float) -> list[MemoryRecord]:
    """The neighbours to show the model, or none when the rule path is certain or nothing is close.

    A candidate already held (same id, same text, or its events already in a
    neighbour) is a redelivery or an exact duplicate: the rule path handles
    it the same way every time, so replays stay deterministic.
    """
    c = item.candidate
    digest = content_hash(c.text)
    events = set(c.source.event_ids)
    for n in near:
        record = n.record
        if record.id == c.candidate_id or record.content_hash == digest:
            return []
        if events and events <= set(record.source.event_ids):
            return []
    return [n.record for n in near if n.similarity >= min_similarity]


async def _ask(
    llm: LlmClient,
    dlq: DeadLetters,
    item: EmbeddedCandidate,
    arrived: EmbeddedCandidate,
    neighbours: list[MemoryRecord],
    stage: str,
) -> Verdict | None:
    outcome = await decide(llm, item.candidate, neighbours)
    if isinstance(outcome, Ok):
        d = outcome.value
        return Verdict(d.action, d.target_id, d.reason)
    if outcome.dead_letter:
        await dlq.send_value(
            arrived.key, codec.dumps(arrived), stage=stage, reason=LLM_INVALID_OUTPUT, error=outcome.describe(OPERATION)
        )
    return None


async def verdicts(
    rt: Runtime,
    batch: Sequence[EmbeddedCandidate],
    dlq: DeadLetters,
    stage: str,
    arrived: Sequence[EmbeddedCandidate] | None = None,
) -> dict[int, Verdict]:
    """The model's verdict per batch position, for the candidates worth asking; one neighbour query for all.

    `arrived`: the batch as it came off the topic (before memory ids), which is what a dead letter keeps.
    """
    arrived = batch if arrived is None else arrived
    llm = rt.llm
    positions = [i for i, item in enumerate(batch) if item.candidate.type in DECIDED_TYPES and item.vector]
    if llm is None or not positions:
        return {}
    probes = [Probe(batch[i].tenant_id, batch[i].user_id, batch[i].candidate.type, batch[i].vector) for i in positions]
    async with rt.pg.connection("llm_neighbours") as conn:
        found = await rt.memories.nearest_batch(conn, probes, limit=NEIGHBOURS)
    asks: dict[int, list[MemoryRecord]] = {}
    for pos, i in enumerate(positions):
        shown = worth_asking(batch[i], found.get(pos, []), rt.settings.llm_decide_min_similarity)
        if shown:
            asks[i] = shown
    answers = await asyncio.gather(*(_ask(llm, dlq, batch[i], arrived[i], shown, stage) for i, shown in asks.items()))
    return {i: v for i, v in zip(asks, answers, strict=True) if v is not None}


def declare() -> None:
    llm_metrics.declare(OPERATION)
