"""Forgetting reaches the embedded broker's log: retention from the topics file, enforced by the store.

The stack runs with a topics file in which every topic that topics.yaml keeps
for days (chat.turns, the pipeline's intermediate topics, commands, the DLQ)
keeps records for 60 s. Two users talk; A is forgotten. Within retention plus
60 s, no topic read from the beginning by a fresh consumer returns A's words
in clear, and no file under the broker's storage holds them; B's memory and
the long-lived, sealed topics are untouched.
"""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from ops.topics import load_specs
from services.archive import read_topic
from services.core import topics
from tests.stack import (
    ROOT,
    Stack,
    embedded_stack,
    produce,
    session_end,
    settle,
    stack_settings,
    turn,
    user_path,
    wait_for,
)

pytestmark = pytest.mark.e2e
TENANT = "log-acme"
RETENTION_MS = 60_000


@pytest.fixture(scope="module")
def short_log_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    data = Path(tmp_path_factory.mktemp("log-forgets"))
    doc = yaml.safe_load((ROOT / "topics.yaml").read_text())
    for spec in doc["topics"].values():
        if spec["retention_ms"] >= 0:
            spec["retention_ms"] = RETENTION_MS
    short = data / "topics-60s.yaml"
    short.write_text(yaml.safe_dump(doc))
    env = {"MEMSTREAM_TOPICS_FILE": str(short), "MEMSTREAM_HTTP_REQUEST_TIMEOUT": "15"}
    with embedded_stack(data / "stack", extra_env=env) as running:
        yield running


def files_holding(folder: Path, word: str) -> list[str]:
    found = subprocess.run(["grep", "-rl", "--", word, str(folder)], capture_output=True, text=True)
    return found.stdout.split()


async def topics_holding(stack: Stack, word: bytes) -> dict[str, int]:
    settings = stack_settings(stack)
    out: dict[str, int] = {}
    for spec in load_specs(Path(stack.env["MEMSTREAM_TOPICS_FILE"])):
        async for batch in read_topic(settings, spec.name):
            for r in batch:
                parts = (r.key or b"", r.value or b"", *(v or b"" for _, v in r.headers or ()))
                if any(word in part for part in parts):
                    out[spec.name] = out.get(spec.name, 0) + 1
    return out


async def test_after_a_forget_and_retention_no_topic_and_no_file_of_the_broker_holds_the_users_words(
    short_log_stack: Stack,
) -> None:
    stack = short_log_stack
    user_a, user_b = f"a-{uuid.uuid4().hex[:6]}", f"b-{uuid.uuid4().hex[:6]}"
    word_a, word_b = f"zanzibar{uuid.uuid4().hex[:10]}", f"quokka{uuid.uuid4().hex[:10]}"
    said = "I live in {w}ville and I love {w} tea."
    events = [
        turn(TENANT, u, f"{u}-s1", i, said.format(w=w))
        for u, w in ((user_a, word_a), (user_b, word_b))
        for i in range(2)
    ]
    events += [session_end(TENANT, u, f"{u}-s1") for u in (user_a, user_b)]
    await produce(stack.bootstrap, events)
    wait_for(lambda: len(stack.memories(TENANT, user_a)) >= 2, 120, "A's memories")
    wait_for(lambda: len(stack.memories(TENANT, user_b)) >= 2, 120, "B's memories")
    kafka_dir = stack.data_dir / "kafka"
    assert files_holding(kafka_dir, word_a)  # the words are on the log in clear (chat.turns), where the test looks

    response = stack.request("DELETE", f"/v1/users/{user_path(user_a)}", params={"tenant_id": TENANT, "wait": "true"})
    assert response.status_code == 200, response.text

    # Retention (60 s) plus 60 s: every record of A was produced before the forget.
    took = settle(lambda: not files_holding(kafka_dir, word_a), RETENTION_MS / 1000 + 60, interval=5)
    assert files_holding(kafka_dir, word_a) == []
    assert await topics_holding(stack, word_a.encode()) == {}
    print(f"the forgotten user's words left the broker's storage {took:.0f} s after the forget")

    # B's memory stays; the sealed long-lived topics keep their records.
    assert len(stack.memories(TENANT, user_b)) >= 2
    settings = stack_settings(stack)
    kept = 0
    async for batch in read_topic(settings, topics.ARCHIVE):
        kept += len(batch)
    assert kept >= 3  # B's turns and session end, sealed
