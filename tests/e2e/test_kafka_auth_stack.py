"""`memstream up` with Kafka authentication on, end to end, on a stack of its own.

The worker (the Faust app), the read service's readiness probe and access
marks, and topic creation all authenticate with MEMSTREAM_KAFKA_SASL_*; a
chat service added with `memstream kafka-users add` produces a turn that
becomes a memory; a client without credentials is refused; no secret,
Kafka's or Postgres's, appears in any log.
"""

from __future__ import annotations

import re
import stat
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError

from ops.embedded.postgres import hba_trusts
from services.core.config import Settings
from services.core.kafka_auth import aiokafka_kwargs
from services.core.pgpass import passfile_path, read_password
from tests.stack import ROOT, Stack, embedded_stack, turn, wait_for

pytestmark = pytest.mark.e2e
MEMSTREAM_PASSWORD = "memstream-kafka-e2e-secret"
CHAT_PASSWORD = "chat-service-e2e-secret"
TENANT = "acme"


@pytest.fixture(scope="module")
def secure_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    env = {
        "MEMSTREAM_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
        "MEMSTREAM_KAFKA_SASL_USERNAME": "memstream",
        "MEMSTREAM_KAFKA_SASL_PASSWORD": MEMSTREAM_PASSWORD,
    }
    with embedded_stack(Path(tmp_path_factory.mktemp("kafka-auth")), extra_env=env) as running:
        yield running


def chat_service(stack: Stack, mechanism: str = "SCRAM-SHA-256") -> Settings:
    return Settings(
        kafka_bootstrap=stack.bootstrap,
        kafka_sasl_mechanism=mechanism,
        kafka_sasl_username="chat",
        kafka_sasl_password=CHAT_PASSWORD,
    )


async def produce_turn(settings: Settings, event: dict[str, object]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=settings.kafka_bootstrap, acks="all", **aiokafka_kwargs(settings))
    await producer.start()
    try:
        await producer.send_and_wait("chat.turns", orjson.dumps(event), key=f"{TENANT}:{event['user_id']}".encode())
    finally:
        await producer.stop()


def test_the_stack_is_ready_with_every_memstream_client_authenticated(secure_stack: Stack) -> None:
    ready = secure_stack.get("/readyz")
    assert ready.status_code == 200, ready.text
    assert "authenticated as 'memstream'" in (secure_stack.data_dir / "logs" / "kafka-gate.log").read_text()


async def test_a_chat_service_with_its_own_user_sends_a_turn_that_becomes_a_memory(secure_stack: Stack) -> None:
    added = subprocess.run(  # noqa: ASYNC221 - a CLI run before the test's first await
        [sys.executable, "-m", "services.cli", "kafka-users", "add", "chat", "--role", "producer", "--password-stdin"],
        input=CHAT_PASSWORD + "\n",
        env=secure_stack.env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert added.returncode == 0, added.stderr
    user = f"ann-{uuid.uuid4().hex[:6]}"
    await produce_turn(chat_service(secure_stack), turn(TENANT, user, "s1", 0, "I prefer aisle seats on long flights."))
    found = wait_for(
        lambda: [m for m in secure_stack.memories(TENANT, user) if "aisle" in m["text"]], 90, "memory from the turn"
    )
    assert found
    # Postgres holds the memory before the index does: recall finds it once the index sink has it.
    # Recall sends access marks to memory.commands: the read service's producer authenticates too.
    recalled = wait_for(
        lambda: secure_stack.recall(TENANT, user, "which seat does ann like?")["memories"], 60, "recall of the memory"
    )
    assert any("aisle" in m["text"] for m in recalled)
    wait_for(lambda: _marks_sent(secure_stack) > 0, 30, "access marks sent")


def _marks_sent(stack: Stack) -> float:
    metrics = stack.get("/metrics").text
    found = re.search(r'^memstream_access_marks_total\{outcome="sent"\} (\S+)$', metrics, re.M)
    return float(found.group(1)) if found else 0.0


async def test_a_client_without_credentials_or_with_wrong_ones_is_refused(secure_stack: Stack) -> None:
    wrong = Settings(
        kafka_bootstrap=secure_stack.bootstrap,
        kafka_sasl_mechanism="SCRAM-SHA-512",
        kafka_sasl_username="memstream",
        kafka_sasl_password="guess",
    )
    for auth in ({}, aiokafka_kwargs(wrong)):
        producer = AIOKafkaProducer(bootstrap_servers=secure_stack.bootstrap, request_timeout_ms=5000, **auth)
        try:
            await producer.start()
            refused = False
        except KafkaError:
            refused = True
        finally:
            await producer.stop()
        assert refused, auth.get("sasl_plain_username", "no credentials")


def test_secrets_are_private_files_and_never_in_a_log(secure_stack: Stack) -> None:
    data = secure_stack.data_dir
    pg_secret = read_password(passfile_path(data))
    assert pg_secret is not None
    for private in (passfile_path(data), data / "kafka-users.json"):
        assert stat.S_IMODE(private.stat().st_mode) == 0o600, private
    assert not hba_trusts((data / "pg" / "pg_hba.conf").read_text())
    logs = [data / "up.log", *(data / "logs").glob("*.log")]
    text = "".join(p.read_text(errors="replace") for p in logs)
    assert "kafka-gate.log" in {p.name for p in logs}
    for secret in (MEMSTREAM_PASSWORD, CHAT_PASSWORD, pg_secret, secure_stack.api_key):
        assert secret not in text
    assert MEMSTREAM_PASSWORD not in (data / "kafka-users.json").read_text()
