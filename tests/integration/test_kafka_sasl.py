"""Kafka authentication and roles against the embedded broker: tansu behind the SCRAM gate, as `memstream up` runs them.

Every client here is built from Settings by services/core/kafka_auth.py, the way
memstream builds its own; a client without credentials, or with wrong ones,
is refused, and an authenticated one reaches only what its role allows
(aiokafka and librdkafka, each with the errors it expects). The first test
records why the gate exists at all: tansu's own `--authentication` cannot
hold a user with the storage the bundled binary has.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import struct
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import (
    GroupAuthorizationFailedError,
    KafkaError,
    TopicAuthorizationFailedError,
    UnknownTopicOrPartitionError,
)
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka import KafkaError as KafkaError_
from confluent_kafka import TopicPartition as CkTopicPartition

from ops.embedded.broker import broker_argv, broker_child, gate_child, kafka_users_path, register_kafka_user
from ops.embedded.supervision import Child, free_port, tcp_open, wait_until
from ops.kafka_gate import _address, _pump
from ops.scram import UserStore
from services.core.config import Settings
from services.core.kafka_auth import aiokafka_kwargs, confluent_config
from services.core.topics import CHANGES, COMMANDS, TURNS
from tests.stack import run_cli

PASSWORD = "correct-horse-battery"


@dataclass
class Gated:
    settings: Settings
    bootstrap: str
    log_dir: Path
    private: str  # tansu's own address, behind the gate

    def as_user(self, username: str, password: str, mechanism: str = "SCRAM-SHA-512") -> Settings:
        return Settings(
            data_dir=self.settings.data_dir,
            kafka_bootstrap=self.bootstrap,
            kafka_sasl_mechanism=mechanism,
            kafka_sasl_username=username,
            kafka_sasl_password=password,
        )


@contextlib.contextmanager
def running(*children: Child) -> Iterator[None]:
    try:
        for child in children:
            child.start()
        yield
    finally:
        for child in reversed(children):
            child.stop()


@pytest.fixture(scope="module")
def gated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gated]:
    data = Path(tmp_path_factory.mktemp("sasl"))
    (data / "logs").mkdir()
    bootstrap = f"127.0.0.1:{free_port()}"
    settings = Settings(
        data_dir=data,
        kafka_bootstrap=bootstrap,
        kafka_sasl_mechanism="SCRAM-SHA-512",
        kafka_sasl_username="memstream",
        kafka_sasl_password=PASSWORD,
    )
    register_kafka_user(settings)
    private = f"127.0.0.1:{free_port()}"
    broker = broker_child(settings, data / "logs", listen=private)
    gate = gate_child(settings, private, data / "logs")
    with running(broker, gate):
        wait_until(lambda: tcp_open("127.0.0.1", int(private.rsplit(":", 1)[1])), 30, "tansu")
        wait_until(lambda: tcp_open("127.0.0.1", int(bootstrap.rsplit(":", 1)[1])), 30, "gate")
        yield Gated(settings, bootstrap, data / "logs", private)


@pytest.fixture
async def topic(gated: Gated) -> str:
    name = f"sasl-{uuid.uuid4().hex[:8]}"
    admin = AIOKafkaAdminClient(bootstrap_servers=gated.bootstrap, **aiokafka_kwargs(gated.settings))
    await admin.start()
    try:
        await admin.create_topics([NewTopic(name, 1, 1)])
    finally:
        await admin.close()
    return name


async def aiokafka_connects(bootstrap: str, settings: Settings | None = None) -> bool:
    """Whether an aiokafka client gets through bootstrap (ApiVersions, SASL, Metadata)."""
    auth = aiokafka_kwargs(settings) if settings is not None else {}
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, request_timeout_ms=5000, **auth)
    try:
        await producer.start()
        return True
    except KafkaError:
        return False
    finally:
        await producer.stop()


async def produce_and_read_back(settings: Settings, topic: str, value: bytes) -> list[bytes]:
    producer = AIOKafkaProducer(bootstrap_servers=settings.kafka_bootstrap, acks="all", **aiokafka_kwargs(settings))
    await producer.start()
    try:
        meta = await producer.send_and_wait(topic, value, key=b"acme:ann")
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(bootstrap_servers=settings.kafka_bootstrap, **aiokafka_kwargs(settings))
    await consumer.start()
    try:
        partition = TopicPartition(topic, meta.partition)
        consumer.assign([partition])
        consumer.seek(partition, meta.offset)
        batch = await consumer.getmany(partition, timeout_ms=10_000)
        return [m.value for msgs in batch.values() for m in msgs if m.value is not None]
    finally:
        await consumer.stop()


def test_tansus_own_authentication_refuses_even_the_users_tansu_user_create_made(tmp_path: Path) -> None:
    """Why the gate: the bundled tansu (memory storage) neither stores a SCRAM user nor lets `user create` in."""
    port = free_port()
    argv = [*broker_argv(f"127.0.0.1:{port}"), "--authentication"]
    broker = Child("tansu-auth", argv, tmp_path)
    with running(broker):
        wait_until(lambda: tcp_open("127.0.0.1", port), 30, "tansu")
        create = subprocess.run(
            [argv[0], "user", "create", "--broker", f"tcp://127.0.0.1:{port}", "alice", PASSWORD],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        assert create.returncode != 0, create.stdout + create.stderr

        alice = Settings(
            kafka_sasl_mechanism="SCRAM-SHA-512", kafka_sasl_username="alice", kafka_sasl_password=PASSWORD
        )
        try:
            connected = asyncio.run(aiokafka_connects(f"127.0.0.1:{port}", alice))
        except KeyError:  # aiokafka's SCRAM client trips over tansu's error reply ("e=..." has no "v")
            connected = False
        assert not connected
    assert "NotAuthenticated" in (tmp_path / "tansu-auth.log").read_text()


async def test_a_client_without_credentials_is_refused(gated: Gated, topic: str) -> None:
    assert not await aiokafka_connects(gated.bootstrap)
    confluent = Producer({"bootstrap.servers": gated.bootstrap})
    with pytest.raises(KafkaException):
        await asyncio.to_thread(confluent.list_topics, topic, timeout=5)


@pytest.mark.parametrize(("user", "password"), [("memstream", "wrong-password"), ("nobody", PASSWORD)])
async def test_a_wrong_password_or_an_unknown_user_is_refused(gated: Gated, user: str, password: str) -> None:
    settings = gated.as_user(user, password)
    assert not await aiokafka_connects(gated.bootstrap, settings)
    confluent = Producer({"bootstrap.servers": gated.bootstrap, **confluent_config(settings)})
    with pytest.raises(KafkaException):
        await asyncio.to_thread(confluent.list_topics, timeout=5)
    assert "authentication failed" in (gated.log_dir / "kafka-gate.log").read_text()


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
async def test_aiokafka_with_credentials_produces_and_consumes(gated: Gated, topic: str, mechanism: str) -> None:
    settings = gated.as_user("memstream", PASSWORD, mechanism)
    value = f"turn via {mechanism}".encode()
    assert value in await produce_and_read_back(settings, topic, value)


def test_confluent_kafka_with_credentials_produces_idempotently_and_consumes(gated: Gated, topic: str) -> None:
    auth = confluent_config(gated.settings)
    producer = Producer({"bootstrap.servers": gated.bootstrap, "enable.idempotence": True, **auth})
    delivered: list[tuple[int, int]] = []

    def report(error: object, message: object) -> None:
        assert error is None, error
        delivered.append((message.partition(), message.offset()))  # type: ignore[attr-defined]

    producer.produce(topic, b"via librdkafka", key=b"acme:ann", on_delivery=report)
    assert producer.flush(15) == 0
    assert len(delivered) == 1
    consumer = Consumer(
        {"bootstrap.servers": gated.bootstrap, "group.id": f"g-{uuid.uuid4().hex}", "enable.auto.commit": False, **auth}
    )
    try:
        partition, offset = delivered[0]
        consumer.assign([CkTopicPartition(topic, partition, offset)])
        deadline = time.monotonic() + 15
        message = None
        while message is None and time.monotonic() < deadline:
            message = consumer.poll(0.5)
        assert message is not None
        assert message.error() is None
        assert message.value() == b"via librdkafka"
    finally:
        consumer.close()


async def test_a_user_added_while_the_gate_runs_can_connect_at_once_and_not_after_removal(
    gated: Gated, topic: str
) -> None:
    users = UserStore(kafka_users_path(gated.settings))
    users.put("chat-backend", "chat-pw")
    chat = gated.as_user("chat-backend", "chat-pw", "SCRAM-SHA-256")
    assert b"from the chat service" in await produce_and_read_back(chat, topic, b"from the chat service")
    assert users.remove("chat-backend")
    assert not await aiokafka_connects(gated.bootstrap, chat)


def test_the_gate_never_sees_or_logs_a_password(gated: Gated) -> None:
    logs = "".join(p.read_text(errors="replace") for p in gated.log_dir.glob("*.log"))
    assert "authenticated as 'memstream'" in logs
    assert PASSWORD not in logs
    assert PASSWORD not in kafka_users_path(gated.settings).read_text()


def _cli(gated: Gated, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MEMSTREAM_DATA_DIR": str(gated.settings.data_dir)}
    return run_cli(env, "kafka-users", *args, stdin=stdin, timeout=60)


async def test_memstream_kafka_users_add_lets_a_chat_service_in_and_remove_shuts_it_out(
    gated: Gated, topic: str
) -> None:
    added = _cli(gated, "add", "support-bot", "--role", "worker", "--password-stdin", stdin="bot-password\n")
    assert added.returncode == 0, added.stderr
    assert "bot-password" not in added.stdout
    listed = _cli(gated, "list")
    assert "support-bot\tworker\tSCRAM-SHA-256, SCRAM-SHA-512" in listed.stdout
    bot = gated.as_user("support-bot", "bot-password", "SCRAM-SHA-256")
    assert b"hello from the bot" in await produce_and_read_back(bot, topic, b"hello from the bot")

    generated = _cli(gated, "add", "other-bot", "--role", "subscriber")
    assert generated.returncode == 0, generated.stderr
    password = generated.stdout.rsplit(": ", 1)[1].strip()
    assert await aiokafka_connects(gated.bootstrap, gated.as_user("other-bot", password))

    assert _cli(gated, "remove", "support-bot").returncode == 0
    assert not await aiokafka_connects(gated.bootstrap, bot)
    assert _cli(gated, "remove", "support-bot").returncode == 1


@pytest.mark.parametrize(
    "garbage",
    [
        struct.pack(">i", 10 * 1024 * 1024),  # a 10 MB frame announced before authenticating
        struct.pack(">i", 7) + b"\x00\x11\x00\x01\xff\xff\xff",  # a SaslHandshake cut inside its header
        struct.pack(">i", 12) + struct.pack(">hhih", 36, 2, 1, -1) + b"\xff\xff",  # SaslAuthenticate, no handshake
        struct.pack(">i", 10) + struct.pack(">hhih", 17, 1, 1, 3) + b"\xff",  # client id cut short
    ],
)
async def test_malformed_requests_before_authentication_close_only_their_connection(
    gated: Gated, garbage: bytes
) -> None:
    host, port = gated.bootstrap.rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(garbage)
    await writer.drain()
    await asyncio.wait_for(reader.read(), 10)  # whatever it answers, the gate then closes
    assert reader.at_eof()
    writer.close()
    assert await aiokafka_connects(gated.bootstrap, gated.settings)


# --- roles: each credential reaches only its scope ---

ROLE_PASSWORD = "role-password"


@dataclass
class Roles:
    worker: Settings
    producer: Settings
    subscriber: Settings


@pytest.fixture(scope="module")
async def roles(gated: Gated) -> Roles:
    """The topics a chat service and a subscriber meet, and one user of each role (the worker is memstream's)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=gated.bootstrap, **aiokafka_kwargs(gated.settings))
    await admin.start()
    try:
        await admin.create_topics([NewTopic(name, 2, 1) for name in (TURNS, COMMANDS, CHANGES)])
    finally:
        await admin.close()
    users = UserStore(kafka_users_path(gated.settings))
    users.put("chat", ROLE_PASSWORD, role="producer")
    users.put("reader", ROLE_PASSWORD, role="subscriber")
    return Roles(gated.settings, gated.as_user("chat", ROLE_PASSWORD), gated.as_user("reader", ROLE_PASSWORD))


async def end_offsets(settings: Settings, topic: str) -> dict[TopicPartition, int]:
    consumer = AIOKafkaConsumer(bootstrap_servers=settings.kafka_bootstrap, **aiokafka_kwargs(settings))
    await consumer.start()
    try:
        partitions = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
        found: dict[TopicPartition, int] = await consumer.end_offsets(partitions)
        return found
    finally:
        await consumer.stop()


async def read_from(settings: Settings, topic: str, partition: int = 0) -> list[bytes]:
    """Fetch from offset 0 without a group (no coordinator, no ListOffsets): only Fetch is asked."""
    consumer = AIOKafkaConsumer(bootstrap_servers=settings.kafka_bootstrap, **aiokafka_kwargs(settings))
    await consumer.start()
    try:
        tp = TopicPartition(topic, partition)
        consumer.assign([tp])
        consumer.seek(tp, 0)
        batch = await consumer.getmany(tp, timeout_ms=5_000)
        return [m.value for msgs in batch.values() for m in msgs if m.value is not None]
    finally:
        await consumer.stop()


async def test_a_producer_writes_chat_turns_but_cannot_forge_a_command(roles: Roles) -> None:
    before = await end_offsets(roles.worker, COMMANDS)
    # Not idempotent: tansu answers aiokafka's InitProducerId (v0) with UNKNOWN_SERVER_ERROR even without the gate;
    # librdkafka's idempotent producer is the next test.
    producer = AIOKafkaProducer(bootstrap_servers=roles.producer.kafka_bootstrap, **aiokafka_kwargs(roles.producer))
    await producer.start()
    try:
        sent = await producer.send_and_wait(TURNS, b'{"turn": 1}', key=b"acme:ann", partition=0)
        with pytest.raises(TopicAuthorizationFailedError):
            await producer.send_and_wait(COMMANDS, b'{"type": "forgotten"}', key=b"acme:ann", partition=0)
        # The connection survives the refusal: the next allowed record goes through it.
        assert (await producer.send_and_wait(TURNS, b'{"turn": 2}', partition=0)).offset == sent.offset + 1
    finally:
        await producer.stop()
    assert await end_offsets(roles.worker, COMMANDS) == before
    assert b'{"turn": 1}' in await read_from(roles.worker, TURNS)


def test_a_librdkafka_producer_gets_topic_authorization_failed_for_any_topic_but_chat_turns(roles: Roles) -> None:
    producer = Producer(
        {
            "bootstrap.servers": roles.producer.kafka_bootstrap,
            "enable.idempotence": True,
            **confluent_config(roles.producer),
        }
    )
    outcomes: dict[str, object] = {}

    def report(error: object, message: object) -> None:
        outcomes[message.topic()] = error  # type: ignore[attr-defined]

    producer.produce(TURNS, b"allowed", key=b"acme:ann", on_delivery=report)
    producer.produce(COMMANDS, b"forged", key=b"acme:ann", on_delivery=report)
    assert producer.flush(20) == 0
    assert outcomes[TURNS] is None
    assert outcomes[COMMANDS].code() == KafkaError_.TOPIC_AUTHORIZATION_FAILED  # type: ignore[attr-defined]


async def test_a_producer_cannot_read_any_topic_nor_create_one(roles: Roles) -> None:
    with pytest.raises(TopicAuthorizationFailedError):
        await read_from(roles.producer, CHANGES)
    admin = AIOKafkaAdminClient(bootstrap_servers=roles.producer.kafka_bootstrap, **aiokafka_kwargs(roles.producer))
    await admin.start()
    try:
        response = await admin.create_topics([NewTopic("made-by-a-producer", 1, 1)])
        assert [(t[0], t[1]) for t in response.topic_errors] == [("made-by-a-producer", 29)]
    finally:
        await admin.close()
    assert "made-by-a-producer" not in await _topic_names(roles.worker)


async def test_a_producers_metadata_request_cannot_create_a_topic(roles: Roles) -> None:
    """tansu creates a topic any Metadata request names with auto-creation on (aiokafka's default): not for a producer."""
    producer = AIOKafkaProducer(
        bootstrap_servers=roles.producer.kafka_bootstrap, request_timeout_ms=3000, **aiokafka_kwargs(roles.producer)
    )
    await producer.start()
    try:
        with pytest.raises(UnknownTopicOrPartitionError):  # not created: the broker says it does not exist
            await producer.send_and_wait("made-by-metadata", b"x")
    finally:
        await producer.stop()
    assert "made-by-metadata" not in await _topic_names(roles.worker)


async def _topic_names(settings: Settings) -> set[str]:
    consumer = AIOKafkaConsumer(bootstrap_servers=settings.kafka_bootstrap, **aiokafka_kwargs(settings))
    await consumer.start()
    try:
        return set(await consumer.topics())
    finally:
        await consumer.stop()


async def test_a_subscriber_follows_memory_changes_in_its_own_group(roles: Roles) -> None:
    change = f"change {uuid.uuid4().hex}".encode()
    assert change in await produce_and_read_back(roles.worker, CHANGES, change)
    consumer = AIOKafkaConsumer(
        CHANGES,
        bootstrap_servers=roles.subscriber.kafka_bootstrap,
        group_id=f"reader.{uuid.uuid4().hex[:6]}",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        **aiokafka_kwargs(roles.subscriber),
    )
    await consumer.start()
    try:
        seen: list[bytes] = []
        deadline = time.monotonic() + 20
        while change not in seen and time.monotonic() < deadline:
            batch = await consumer.getmany(timeout_ms=1000)
            seen += [m.value for msgs in batch.values() for m in msgs if m.value is not None]
        assert change in seen
        await consumer.commit()  # OffsetCommit on its own group
    finally:
        await consumer.stop()


async def test_a_subscriber_cannot_write_read_other_topics_or_join_the_pipelines_groups(roles: Roles) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=roles.subscriber.kafka_bootstrap, **aiokafka_kwargs(roles.subscriber))
    await producer.start()
    try:
        with pytest.raises(TopicAuthorizationFailedError):
            await producer.send_and_wait(TURNS, b"not a producer", partition=0)
    finally:
        await producer.stop()
    with pytest.raises(TopicAuthorizationFailedError):
        await read_from(roles.subscriber, TURNS)
    consumer = AIOKafkaConsumer(
        CHANGES,
        bootstrap_servers=roles.subscriber.kafka_bootstrap,
        group_id="memstream-qdrant_sink",
        **aiokafka_kwargs(roles.subscriber),
    )
    try:
        with pytest.raises(GroupAuthorizationFailedError):  # at FindCoordinator, inside start()
            await consumer.start()
    finally:
        await consumer.stop()


def test_a_librdkafka_subscriber_consumes_memory_changes_in_a_group_and_is_refused_chat_turns(
    roles: Roles, gated: Gated
) -> None:
    change = f"change {uuid.uuid4().hex}".encode()
    writer = Producer({"bootstrap.servers": gated.bootstrap, **confluent_config(roles.worker)})
    writer.produce(CHANGES, change, key=b"acme:ann")
    assert writer.flush(15) == 0
    auth = confluent_config(roles.subscriber)
    consumer = Consumer(
        {
            "bootstrap.servers": gated.bootstrap,
            "group.id": f"reader-{uuid.uuid4().hex[:6]}",
            "auto.offset.reset": "earliest",
            # With librdkafka's defaults (45 s, 300 s) the first join takes 20 s against tansu, gate or not.
            "session.timeout.ms": 6000,
            "max.poll.interval.ms": 10000,
            **auth,
        }
    )
    try:
        consumer.subscribe([CHANGES])
        seen: list[bytes] = []
        deadline = time.monotonic() + 30
        while change not in seen and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                seen.append(message.value() or b"")
        assert change in seen
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    reader = Consumer({"bootstrap.servers": gated.bootstrap, "group.id": "reader", **auth})
    try:
        reader.assign([CkTopicPartition(TURNS, 0, 0)])
        error = None
        deadline = time.monotonic() + 15
        while error is None and time.monotonic() < deadline:
            message = reader.poll(0.5)
            if message is not None and message.error() is not None:
                error = message.error()
        assert error is not None
        assert error.code() == KafkaError_.TOPIC_AUTHORIZATION_FAILED
    finally:
        reader.close()
    # librdkafka asked nothing the gate could not read (client telemetry is not advertised), so no connection of
    # a restricted role was closed under it.
    assert "is not one the gate reads" not in (gated.log_dir / "kafka-gate.log").read_text()


def test_kafka_users_list_shows_roles_and_warns_of_a_user_without_one(gated: Gated, roles: Roles) -> None:
    path = kafka_users_path(gated.settings)
    UserStore(path).put("legacy", "pw")
    data = json.loads(path.read_text())
    del data["roles"]["legacy"]
    path.write_text(json.dumps(data))
    listed = _cli(gated, "list")
    assert listed.returncode == 0, listed.stderr
    assert "chat\tproducer\t" in listed.stdout
    assert "reader\tsubscriber\t" in listed.stdout
    assert "legacy\tworker (no role stored" in listed.stdout
    assert "'legacy' has no role" in listed.stderr
    refused = _cli(gated, "add", "x", "--role", "admin")
    assert refused.returncode != 0
    assert "invalid choice" in refused.stderr


# --- before authentication: a deadline, and no broker connection ---


async def _listening(port: int) -> None:
    deadline = time.monotonic() + 30
    while True:
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.1)
            continue
        writer.close()
        return


async def test_an_unauthenticated_client_never_reaches_the_broker_and_is_closed_at_the_deadline(
    gated: Gated, tmp_path: Path
) -> None:
    """A gate process (as `memstream up` starts it) in front of a relay to tansu that counts its connections."""
    accepted = 0

    async def relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal accepted
        accepted += 1
        up_reader, up_writer = await asyncio.open_connection(*_address(gated.private))
        await _pump(reader, writer, up_reader, up_writer)

    counting = await asyncio.start_server(relay, "127.0.0.1", 0)
    relay_port = counting.sockets[0].getsockname()[1]
    port = free_port()
    argv = [sys.executable, "-m", "ops.kafka_gate", "--listen", f"127.0.0.1:{port}", "--upstream"]
    argv += [f"127.0.0.1:{relay_port}", "--users", str(kafka_users_path(gated.settings))]
    gate = Child("kafka-gate-deadline", argv, tmp_path, env={**os.environ, "MEMSTREAM_KAFKA_GATE_AUTH_DEADLINE": "1.5"})
    gate.start()
    bootstrap = f"127.0.0.1:{port}"
    try:
        await _listening(port)
        # A client that asks ApiVersions is answered, then held to the same deadline.
        asking_reader, asking_writer = await asyncio.open_connection("127.0.0.1", port)
        request = struct.pack(">hhih", 18, 0, 5, -1)
        asking_writer.write(struct.pack(">i", len(request)) + request)
        size = struct.unpack(">i", await asyncio.wait_for(asking_reader.readexactly(4), 10))[0]
        answer = await asking_reader.readexactly(size)
        assert struct.unpack(">ih", answer[:6]) == (5, 0)
        before = accepted  # the gate's own ApiVersions fetch, once
        started = time.monotonic()
        silent_reader, silent_writer = await asyncio.open_connection("127.0.0.1", port)
        assert not await aiokafka_connects(bootstrap)  # no credentials
        assert not await aiokafka_connects(bootstrap, gated.as_user("memstream", "wrong"))
        assert await asyncio.wait_for(silent_reader.read(), 10) == b""
        assert await asyncio.wait_for(asking_reader.read(), 10) == b""
        elapsed = time.monotonic() - started
        assert elapsed < 6, elapsed
        assert accepted == before <= 1, "a client that never authenticated made the gate connect to the broker"
        assert await aiokafka_connects(bootstrap, gated.settings)
        assert accepted > before  # an authenticated client does reach the broker: the count is live
        for w in (silent_writer, asking_writer):
            w.close()
    finally:
        gate.stop()
        counting.close()
    assert "not authenticated within 1.5s" in (tmp_path / "kafka-gate-deadline.log").read_text()
