"""Semantic synthesis by the LLM (optional): the model words a topic's memory, the rules decide everything else.

Which topics exist, their members, ids and versions stay the rule path's
(agents.maintenance.rules), so a pass is as idempotent with a model as
without: only the text of a new semantic version changes. The model is
asked before the pass's write transaction, from a plan made on a plain read,
never while the user's rows are locked; the write re-plans and takes a
model's text only for a record id it planned too. A bad answer (invalid twice)
keeps the rule text and dead-letters the planned record as
`llm_invalid_output`; an outage only keeps the rule text.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace

from agents.maintenance.rules.plan import Effect
from agents.maintenance.rules.synthesized import covered
from schemas import ChangeOp, MemoryRecord, MemoryType, codec, partition_key
from services.core.metrics import LLM as llm_metrics
from services.core.textutil import content_hash
from services.llm import LlmClient, Ok, synthesize

OPERATION = "synthesize"
LLM_INVALID_OUTPUT = "llm_invalid_output"
# (topic, member texts) → the model's text, or None to keep the rule text.
Synthesis = Callable[[MemoryRecord, list[str]], Awaitable[str | None]]
# (key, value, error) → the value is on memory.dlq.
DeadLetter = Callable[[bytes, bytes, str], Awaitable[None]]


def llm_synthesis(client: LlmClient, dead_letter: DeadLetter) -> Synthesis:
    llm_metrics.declare(OPERATION)

    async def synthesis(record: MemoryRecord, members: list[str]) -> str | None:
        outcome = await synthesize(client, record.category or record.key_name or "", members)
        if isinstance(outcome, Ok):
            return outcome.value
        if outcome.dead_letter:
            key = partition_key(record.tenant_id, record.user_id)
            await dead_letter(key, codec.dumps(record), outcome.describe(OPERATION))
        return None

    return synthesis


def new_topics(effects: list[Effect]) -> list[MemoryRecord]:
    return [e.record for e in effects if e.op is ChangeOp.ADDED and e.record.type is MemoryType.SEMANTIC]


async def worded(effects: list[Effect], texts_of: Mapping[str, str], synthesis: Synthesis) -> dict[str, str]:
    """The model's text per new semantic record id; `texts_of` maps the user's memory ids to their texts."""
    out: dict[str, str] = {}
    for record in new_topics(effects):
        members = [texts_of[i] for i in sorted(covered(record)) if i in texts_of]
        if members and (text := await synthesis(record, members)):
            out[record.id] = text
    return out


def with_texts(effects: list[Effect], texts: Mapping[str, str]) -> list[Effect]:
    """The planned effects, new topics worded by the model where it answered."""
    return [
        replace(
            e,
            record=e.record.model_copy(
                update={"text": texts[e.record.id], "content_hash": content_hash(texts[e.record.id])}
            ),
        )
        if e.record.id in texts and e.op is ChangeOp.ADDED
        else e
        for e in effects
    ]
