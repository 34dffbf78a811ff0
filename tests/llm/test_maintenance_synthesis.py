"""Semantic synthesis by the LLM in a real maintenance pass (real Postgres, the fake OpenAI server).

The rules decide which topic memories exist and their ids; the model only
words them. A garbage answer keeps the rule text and is dead-lettered; a
re-run with the same `now` changes nothing either way.
"""

from __future__ import annotations

from agents.maintenance.run import run_pass
from agents.maintenance.synthesis import llm_synthesis
from schemas import MemoryRecord, MemoryType, codec
from services.llm import LlmClient
from services.stores.postgres import MemoryReader, Outbox, PgPool
from tests.llm.fake_openai import FakeOpenAI, Reply, answer
from tests.stores.test_maintenance import NOW, RULES, Sent, episode, keys_of, near_axis, seed

WORDED = "The user trains for a marathon and has talked about it in five sessions."


class DeadLetters:
    def __init__(self) -> None:
        self.sent: list[tuple[bytes, bytes, str]] = []

    async def __call__(self, key: bytes, value: bytes, error: str) -> None:
        self.sent.append((key, value, error))


def client(fake: FakeOpenAI) -> LlmClient:
    return LlmClient(base_url=fake.base_url, model="m", api_key="k", timeout=2.0, concurrency=2, max_retries=0)


async def semantic(pool: PgPool, user: str) -> MemoryRecord:
    [record] = await MemoryReader(pool).list_memories(
        "t", user, type_=MemoryType.SEMANTIC, status=None, limit=10, offset=0
    )
    return record


async def test_the_model_words_a_new_topic_and_a_rerun_asks_nothing(pool: PgPool, fake: FakeOpenAI) -> None:
    await seed(pool, [(episode(i, user="w"), near_axis(i)) for i in range(5)])
    outbox, dead = Outbox(pool), DeadLetters()
    llm = client(fake)
    fake.queue(answer({"text": WORDED}))
    counts = await run_pass(
        pool, outbox, RULES, NOW, Sent(outbox, keys_of(pool)), "t", "w", llm_synthesis(llm, dead), keys=keys_of(pool)
    )
    assert counts["semantic"] == 1
    record = await semantic(pool, "w")
    assert record.text == WORDED
    (request,) = fake.requests
    prompt = request["messages"][-1]["content"]
    assert "Topic: marathon" in prompt
    assert all(f"episode {i} about marathon training" in prompt for i in range(5))
    assert dead.sent == []
    # Same `now`: the topic exists, nothing is planned, nothing is asked.
    again = await run_pass(
        pool, outbox, RULES, NOW, Sent(outbox, keys_of(pool)), "t", "w", llm_synthesis(llm, dead), keys=keys_of(pool)
    )
    assert set(again) == {"users"}
    assert len(fake.requests) == 1
    await llm.close()


async def test_garbage_keeps_the_rule_text_and_is_dead_lettered(pool: PgPool, fake: FakeOpenAI) -> None:
    await seed(pool, [(episode(i, user="x"), near_axis(i)) for i in range(5)])
    outbox, dead = Outbox(pool), DeadLetters()
    llm = client(fake)
    fake.queue(Reply(content="Marathons!"), Reply(content='{"text": ""}'))
    sent = Sent(outbox, keys_of(pool))
    await run_pass(pool, outbox, RULES, NOW, sent, "t", "x", llm_synthesis(llm, dead), keys=keys_of(pool))
    record = await semantic(pool, "x")
    assert record.text.startswith("Recurring topic: marathon")
    ((key, value, error),) = dead.sent
    assert key == b"t:x"
    assert codec.loads(MemoryRecord, value).id == record.id
    assert "synthesize" in error
    assert 'raw output: {"text": ""}' in error
    assert any(c.record.id == record.id for c in sent.changes)
    await llm.close()
