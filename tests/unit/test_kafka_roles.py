"""Roles in the gate's users file (ops/scram.py UserStore): stored with the user, and a default for older files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ops.kafka_acl import DEFAULT_ROLE, PRODUCER, SUBSCRIBER, WORKER
from ops.scram import UserStore


def test_a_user_keeps_the_role_it_was_given_and_loses_it_with_the_user(tmp_path: Path) -> None:
    store = UserStore(tmp_path / "kafka-users.json")
    store.put("chat", "pw", role=PRODUCER)
    store.put("bot", "pw", role=SUBSCRIBER)
    store.put("memstream", "pw")
    fresh = UserStore(store.path)  # what the gate reads
    assert (fresh.role("chat"), fresh.role("bot"), fresh.role("memstream")) == (PRODUCER, SUBSCRIBER, WORKER)
    store.put("chat", "new-pw", role=SUBSCRIBER)
    assert UserStore(store.path).effective_role("chat") == SUBSCRIBER
    assert store.remove("chat")
    assert "chat" not in json.loads(store.path.read_text())["roles"]
    assert UserStore(store.path).role("bot") == SUBSCRIBER


def test_a_user_stored_before_roles_existed_is_a_worker(tmp_path: Path) -> None:
    store = UserStore(tmp_path / "kafka-users.json")
    store.put("old", "pw")
    data = json.loads(store.path.read_text())
    del data["roles"]
    store.path.write_text(json.dumps(data))
    legacy = UserStore(store.path)
    assert legacy.role("old") is None
    assert legacy.effective_role("old") == DEFAULT_ROLE == WORKER
    assert legacy.verify("old", "pw")


def test_an_unknown_role_is_refused(tmp_path: Path) -> None:
    store = UserStore(tmp_path / "kafka-users.json")
    with pytest.raises(ValueError, match="role"):
        store.put("chat", "pw", role="admin")
    assert store.users() == {}


def test_memstreams_own_user_is_registered_as_a_worker_again_whatever_was_stored(tmp_path: Path) -> None:
    """`kafka-users add memstream --role producer` with the same password must not leave the stack a producer."""
    from pydantic import SecretStr

    from ops.embedded.broker import kafka_users_path, register_kafka_user
    from services.core.config import Settings

    settings = Settings(
        data_dir=tmp_path,
        kafka_sasl_mechanism="SCRAM-SHA-512",
        kafka_sasl_username="memstream",
        kafka_sasl_password=SecretStr("s3cret"),
    )
    users = UserStore(kafka_users_path(settings))
    users.put("memstream", "s3cret", role="producer")
    register_kafka_user(settings)
    assert UserStore(kafka_users_path(settings)).role("memstream") == "worker"
