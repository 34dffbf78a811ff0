"""`memstream up` twice on one data dir: the second finds the first's Kafka topics, messages and offsets.

Memory being the same after a restart proves little here (every stage's
writes are idempotent, so a full reprocessing would also leave it the
same); the consumer groups' committed offsets and the raw log are what the
durable broker keeps, so those are compared directly.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from services.core import topics
from tests.stack import Stack, embedded_stack, produce, session_end, settle, turn

pytestmark = pytest.mark.e2e
TENANT = "durable"
GROUPS = ("memstream-window", "memstream-consolidator")


def committed(stack: Stack, group: str, topic: str) -> dict[int, int]:
    partitions = AdminClient({"bootstrap.servers": stack.bootstrap}).list_topics(topic, timeout=30).topics[topic]
    reader = Consumer({"bootstrap.servers": stack.bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        found = reader.committed([TopicPartition(topic, p) for p in partitions.partitions], timeout=30)
        return {tp.partition: tp.offset for tp in found}
    finally:
        reader.close()


def turn_ids_in_log(stack: Stack, expected: int, within: float = 60) -> set[str]:
    """Event ids read back from chat.turns from the start by a new group."""
    reader = Consumer(
        {
            "bootstrap.servers": stack.bootstrap,
            "group.id": f"test-{uuid.uuid4().hex}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": 6000,
        }
    )
    reader.subscribe([topics.TURNS])
    seen: set[str] = set()
    deadline = time.monotonic() + within
    try:
        while len(seen) < expected and time.monotonic() < deadline:
            for message in reader.consume(500, 0.5):
                if message.error() is None and message.value():
                    seen.add(orjson.loads(message.value())["event_id"])
    finally:
        reader.close()
    return seen


def remembered(stack: Stack, user: str, turns: list[dict[str, Any]]) -> bool:
    exchanges = stack.memories(TENANT, user, type="exchange")
    have = {e for m in exchanges for e in m["source"]["event_ids"]}
    return all(t["event_id"] in have for t in turns)


def test_a_second_up_finds_the_first_ones_log_and_offsets(tmp_path: Path) -> None:
    user = f"durable-{uuid.uuid4().hex[:8]}"
    first = [turn(TENANT, user, "s1", i, f"Note {i}: the boat is moored at pier {i + 3}.") for i in range(12)]
    second = [turn(TENANT, user, "s2", i, f"Note {i}: the kayak is stored in shed {i + 5}.") for i in range(5)]
    data = tmp_path / "stack"
    read_by = dict(zip(GROUPS, (topics.TURNS, "memory.embedded"), strict=True))

    with embedded_stack(data) as stack:
        asyncio.run(produce(stack.bootstrap, [*first, session_end(TENANT, user, "s1")]))
        assert settle(lambda: remembered(stack, user, first), timeout=120) is not None
        time.sleep(3)  # the commits behind that memory land every second
        before = {group: committed(stack, group, topic) for group, topic in read_by.items()}
        ids_before = {m["id"] for m in stack.memories(TENANT, user)}
    assert max(before["memstream-window"].values()) == len(first) + 1, before  # one user: one partition

    with embedded_stack(data) as stack:
        after = {group: committed(stack, group, topic) for group, topic in read_by.items()}
        for group, offsets in before.items():
            kept = {p: o for p, o in after[group].items() if o >= offsets[p]}
            assert kept == after[group], f"{group} offsets went back: {offsets} -> {after[group]}"
        assert {t["event_id"] for t in first} <= turn_ids_in_log(stack, len(first) + 1)
        asyncio.run(produce(stack.bootstrap, second))
        assert settle(lambda: remembered(stack, user, second), timeout=120) is not None
        assert ids_before <= {m["id"] for m in stack.memories(TENANT, user)}
