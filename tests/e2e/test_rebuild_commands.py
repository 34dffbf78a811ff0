"""A generation rebuilt from memory.archive alone keeps every command users gave (stack of its own).

Turns stream through the real pipeline; a user adds a memory by hand, corrects one, deletes one, deletes a
topic, and a second user is forgotten. Then `memory.commands` expires: the topic is deleted and made again,
empty, as retention leaves it (its records were short-lived on purpose). A generation rebuilt from the archive
must equal the live memory (the deleted stays deleted, the correction and the manual add stay, the forgotten
user is not there), and none of its consumer groups ever committed an offset of `memory.commands`: the
commands came out of the archive, sealed there by the commands stage as it applied them.
"""

from __future__ import annotations

import asyncio
import subprocess
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from psycopg.rows import dict_row

from ops.topics import create_topics, load_specs
from services.archive import read_topic
from services.archive.codec import read_record
from services.core import generations, topics
from services.core.config import Settings
from services.core.kafka_auth import aiokafka_kwargs, confluent_config
from services.core.stages import STAGE_NAMES, group_id
from tests.stack import ROOT, Stack, embedded_stack, produce, run_cli, stack_settings, turn, wait_for
from tests.user_rows import settled_rows

pytestmark = pytest.mark.e2e
TENANT = "replay"
# Everything a rebuild must reproduce: all but the consolidator's clock, the embedding (batched differently) and
# access (recall marks are not memory, and these tests ask with record_access off).
COLUMNS = """id, user_id, type, text, content_hash, category, key_name, value, status, observed_at, superseded_at,
superseded_by, source_session_id, provenance, entities, reinforcement_count, compressed, question"""


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    # A command waits for its memory.changes record; on a loaded 2-core CI machine a fresh stack took over 12 s.
    slow_ok = {"MEMSTREAM_HTTP_REQUEST_TIMEOUT": "35", "MEMSTREAM_COMMAND_WAIT_TIMEOUT": "30"}
    with embedded_stack(Path(tmp_path_factory.mktemp("replay")), extra_env=slow_ok) as running:
        yield running


def snapshot(dsn: str) -> list[dict[str, Any]]:
    with psycopg.connect(dsn, row_factory=dict_row) as conn:
        return list(conn.execute(f"SELECT {COLUMNS} FROM memories WHERE tenant_id = %s ORDER BY id", (TENANT,)))


def settled(dsn: str) -> list[dict[str, Any]]:
    return settled_rows(dsn, lambda: snapshot(dsn))


def applied(response: Any) -> dict[str, Any]:
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    assert body["status"] == "applied", body
    return body


def memstream(stack: Stack, *args: str) -> subprocess.CompletedProcess[str]:
    done = run_cli(stack.env, *args)
    print(done.stdout, done.stderr)
    return done


async def expire_commands(settings: Settings) -> None:
    """`memory.commands` as retention leaves it: deleted and made again from topics.yaml, empty."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": settings.kafka_bootstrap, **confluent_config(settings)})
    for future in admin.delete_topics([topics.COMMANDS], operation_timeout=30).values():
        future.result(30)
    spec = [s for s in load_specs(ROOT / "topics.yaml") if s.name == topics.COMMANDS]
    for _ in range(30):  # a deleted topic may take a moment to be gone everywhere
        try:
            await create_topics(settings.kafka_bootstrap, spec, confluent_config(settings))
            break
        except Exception:
            await asyncio.sleep(1.0)
    records = 0
    async for batch in read_topic(settings, topics.COMMANDS):
        records += len(batch)
    assert records == 0


async def committed_on(settings: Settings, group: str, topic: str) -> dict[int, int]:
    """The offsets `group` committed on `topic`, by partition (none: it never consumed it)."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=settings.kafka_bootstrap,
        group_id=group,
        enable_auto_commit=False,
        **aiokafka_kwargs(settings),
    )
    await consumer.start()
    try:
        await consumer.topics()
        tps = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
        found = {tp.partition: await consumer.committed(tp) for tp in tps}
        return {p: o for p, o in found.items() if o is not None}
    finally:
        await consumer.stop()


async def test_a_generation_rebuilt_from_the_archive_alone_keeps_every_command(stack: Stack) -> None:
    settings = stack_settings(stack)
    dsn = settings.pg_dsn
    user, other = f"u-{uuid.uuid4().hex[:6]}", f"o-{uuid.uuid4().hex[:6]}"
    start = datetime.now(UTC) - timedelta(minutes=5)
    said = [
        "I live in Pune and I work as a nurse.",
        "I prefer green tea over coffee.",
        "My favorite music is late baroque chamber music.",
        "We went hiking near the glacier lake and it rained all afternoon.",
    ]
    events = [
        turn(TENANT, u, f"{u}-s1", i, text, ts=start + timedelta(minutes=i))
        for u in (user, other)
        for i, text in enumerate(said)
    ]
    await produce(stack.bootstrap, events)
    wait_for(lambda: any("baroque" in r["text"] for r in snapshot(dsn) if r["user_id"] == user), 180, "memories")
    live = settled(dsn)
    mine = [r for r in live if r["user_id"] == user and r["status"] == "active"]
    music = next(r for r in mine if "baroque" in r["text"] and r["type"] != "exchange")
    tea = next(r for r in mine if "green tea" in r["text"] and r["type"] != "exchange")

    base = f"/v1/users/{user}/memories"
    params = {"tenant_id": TENANT, "wait": "true"}
    manual = applied(
        stack.request("POST", base, params=params, json={"type": "preference", "text": "Loves rainy Sunday walks"})
    )
    corrected = applied(
        stack.request("PATCH", f"{base}/{tea['id']}", params=params, json={"text": "I prefer jasmine tea"})
    )
    applied(stack.request("DELETE", f"{base}/{music['id']}", params=params))
    applied(stack.request("DELETE", base, params={**params, "topic": "glacier lake"}))
    applied(stack.request("DELETE", f"/v1/users/{other}", params=params))
    live = settled(dsn)
    held = {r["id"]: r for r in live}
    assert held[manual["memory_id"]]["status"] == "active"
    assert held[tea["id"]]["status"] == "superseded"
    assert any(r["text"] == "I prefer jasmine tea" and r["status"] == "active" for r in live), corrected
    assert held[music["id"]]["status"] == "deleted"
    assert any(r["status"] == "deleted" and "glacier" in r["text"] for r in live)
    assert not any(r["user_id"] == other for r in live)
    # The commands are in the archive: sealed (no text in clear), and the forget as a marker.
    kinds: dict[str, int] = {}
    async for batch in read_topic(settings, topics.ARCHIVE):
        for message in batch:
            record = read_record(message.value)
            if record.user_id in (user, other) and record.type in ("command", "forgotten"):
                kinds[record.type] = kinds.get(record.type, 0) + 1
                assert b"jasmine" not in message.value
                assert b"Sunday" not in message.value
    assert kinds == {"command": 4, "forgotten": 1}

    await expire_commands(settings)
    done = memstream(stack, "rebuild", "generation", "v3", "--from", "archive")

    assert done.returncode == 0, done.stderr
    assert "generation v3 ready" in done.stdout
    rebuilt = snapshot(psycopg.conninfo.make_conninfo(dsn, options="-c search_path=g_v3,public"))
    assert rebuilt == live
    app_id = generations.scoped(settings, "v3").app_id
    for stage in STAGE_NAMES:
        assert await committed_on(settings, group_id(app_id, stage), topics.COMMANDS) == {}
    assert await committed_on(settings, group_id(app_id, "consolidator"), topics.ARCHIVE)  # where commands came from
