"""Turns in without Kafka (POST /v1/turns, `memstream produce`), and the confluent-kafka clients behind them,
against the embedded broker (tansu): idempotent producer, partitioning, topic administration."""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
import time
import uuid
from typing import Any

import httpx
import orjson
import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka.partitioner import DefaultPartitioner
from confluent_kafka.admin import AdminClient

from ops.topics import TopicSpec, create_topics, load_specs
from schemas import TurnEvent
from services.core import topics
from services.kafka.producer import TurnProducer
from tests.stack import ROOT, Stack, turn, wait_for

pytestmark = pytest.mark.e2e
TENANT = "ingest"


def new_user() -> str:
    return f"user-{uuid.uuid4().hex[:8]}"


def ingest(stack: Stack, body: Any) -> httpx.Response:
    return stack.request("POST", "/v1/turns", json=body)


def recalled(stack: Stack, user: str, query: str, needle: str) -> bool:
    return any(needle in m["text"] for m in stack.recall(TENANT, user, query, record_access=False)["memories"])


async def event_ids_until(stack: Stack, marker: str, within: float = 60.0) -> set[str]:
    """Event ids on chat.turns, read from the start until the event `marker` (sent last) shows up."""
    consumer = AIOKafkaConsumer(
        topics.TURNS,
        bootstrap_servers=stack.bootstrap,
        group_id=f"test-{uuid.uuid4().hex}",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    await consumer.start()
    seen: set[str] = set()
    try:
        deadline = time.monotonic() + within
        while marker not in seen and time.monotonic() < deadline:
            for messages in (await consumer.getmany(timeout_ms=500)).values():
                for message in messages:
                    with contextlib.suppress(orjson.JSONDecodeError, KeyError, TypeError):  # hostile input
                        seen.add(str(orjson.loads(message.value or b"")["event_id"]))
        assert marker in seen, f"{marker} not on {topics.TURNS} within {within}s"
        return seen
    finally:
        await consumer.stop()


def test_a_turn_sent_over_http_becomes_recallable(stack: Stack) -> None:
    user = new_user()
    response = ingest(stack, turn(TENANT, user, "s1", 0, "I really like cardamom buns with my coffee."))
    assert response.status_code == 202, response.text
    assert response.json() == {"accepted": 1}
    wait_for(lambda: recalled(stack, user, "what pastry does the user like?", "cardamom buns"), 60, "ingested turn")


async def test_a_batch_with_one_bad_event_is_refused_whole_and_nothing_of_it_reaches_the_topic(stack: Stack) -> None:
    user = new_user()
    batch = [turn(TENANT, user, "s1", i, f"I collect vintage stamps from country {i}.") for i in range(3)]
    batch[1]["turn_index"] = -1
    response = ingest(stack, batch)
    assert response.status_code == 422
    [detail] = response.json()["error"]["details"]
    assert detail["loc"] == ["body", 1]
    assert detail["msg"].startswith("turn_index:")
    # The same user's next turn: one partition per user, so once it is on the topic the refused ones would be too.
    marker = turn(TENANT, user, "s2", 0, "I also keep an aquarium.")
    assert ingest(stack, [marker]).status_code == 202
    seen = await event_ids_until(stack, marker["event_id"])
    assert not seen & {e["event_id"] for e in batch}
    wait_for(lambda: recalled(stack, user, "aquarium", "aquarium"), 60, "the turn after the refused batch")
    assert not any("stamps" in m["text"] for m in stack.memories(TENANT, user))


def test_a_batch_is_accepted_once_the_broker_acknowledged_all_of_it_in_order(stack: Stack) -> None:
    user = new_user()
    batch = [turn(TENANT, user, "s1", i, f"Line {i} of my packing list: item number {i}.") for i in range(200)]
    assert ingest(stack, batch).json() == {"accepted": 200}

    def complete() -> list[int] | None:
        response = stack.get("/v1/sessions/s1/working", tenant_id=TENANT, user_id=user)
        indexes = [t["turn_index"] for t in response.json()["turns"]] if response.status_code == 200 else []
        return indexes if indexes and indexes[-1] == 199 else None

    indexes = wait_for(complete, 60, "the batch's last turn in the session window")
    assert indexes[0] == 0  # the first turn is always kept
    assert indexes[-3:] == [197, 198, 199]
    assert indexes == sorted(indexes)


async def test_the_producer_is_idempotent_on_the_embedded_broker_and_partitions_like_aiokafka(stack: Stack) -> None:
    stats: list[dict[str, Any]] = []
    config = {"statistics.interval.ms": 100, "stats_cb": lambda raw: stats.append(json.loads(raw))}
    users = [new_user() for _ in range(16)]
    events = [TurnEvent.model_validate(turn(TENANT, user, "s1", i, f"message {i}")) for i in range(5) for user in users]
    async with TurnProducer(stack.bootstrap, config=config) as producer:
        delivered = await producer.send_events(events)
        deadline = time.monotonic() + 10
        while not any(s.get("eos", {}).get("idemp_state") == "Assigned" for s in stats):
            assert time.monotonic() < deadline, f"no producer id granted: {stats[-1:]}"
            await asyncio.sleep(0.1)
    eos = next(s["eos"] for s in stats if s.get("eos", {}).get("idemp_state") == "Assigned")
    assert eos["producer_id"] >= 0
    partitions = list(range(8))
    aiokafka_choice = DefaultPartitioner()
    for event, where in zip(events, delivered, strict=True):
        assert where.partition == aiokafka_choice(event.key, partitions, partitions)
    # Per user, offsets grow in send order: retries (idempotent) never reorder a user's turns.
    for user in users:
        offsets = [d.offset for e, d in zip(events, delivered, strict=True) if e.user_id == user]
        assert offsets == sorted(offsets)
        assert len(set(offsets)) == len(offsets)


async def test_topics_are_created_once_through_the_admin_client(stack: Stack) -> None:
    assert await create_topics(stack.bootstrap, load_specs(ROOT / "topics.yaml")) == []  # `up` made them
    name = f"test.topic.{uuid.uuid4().hex[:8]}"
    spec = TopicSpec(name, partitions=3, replication_factor=1, retention_ms=60_000, key="tenant_id:user_id")
    assert await create_topics(stack.bootstrap, [spec]) == [name]
    assert await create_topics(stack.bootstrap, [spec]) == []
    metadata = AdminClient({"bootstrap.servers": stack.bootstrap}).list_topics(timeout=10)
    assert len(metadata.topics[name].partitions) == 3
    cli = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "services.cli", "topics", "create"],
        cwd=ROOT,
        env=stack.env,
        capture_output=True,
        timeout=120,
    )
    assert cli.returncode == 0, cli.stderr.decode()
    assert b"0 created" in cli.stdout


def test_memstream_produce_sends_json_lines_from_stdin(stack: Stack) -> None:
    user = new_user()
    lines = [turn(TENANT, user, "s1", 0, "I play the bassoon in an orchestra."), turn(TENANT, user, "s1", 1, "Nice!")]
    cli = subprocess.run(
        [sys.executable, "-m", "services.cli", "produce", "-"],
        cwd=ROOT,
        env=stack.env,
        input=b"\n".join(orjson.dumps(line) for line in lines) + b"\n",
        capture_output=True,
        timeout=120,
    )
    assert cli.returncode == 0, cli.stderr.decode()
    assert b"produced 2 events" in cli.stdout
    wait_for(lambda: recalled(stack, user, "which instrument?", "bassoon"), 60, "turn produced by the CLI")
