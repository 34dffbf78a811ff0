"""docker-compose.yml's Kafka ACLs (read as YAML: no Docker engine here): each principal has its role's scope only."""

from __future__ import annotations

import shlex
from pathlib import Path

import yaml

COMPOSE = Path(__file__).resolve().parents[2] / "docker-compose.yml"


def _acls() -> dict[str, list[list[str]]]:
    """Principal → the argument lists of its `allow` lines in the kafka-users script."""
    script = yaml.safe_load(COMPOSE.read_text())["services"]["kafka-users"]["command"][0].replace("\\\n", " ")
    found: dict[str, list[list[str]]] = {}
    for line in script.splitlines():
        words = shlex.split(line)
        if words[:1] == ["allow"]:
            found.setdefault(words[1], []).append(words[2:])
    return found


def _grants(args: list[str]) -> tuple[set[str], list[str]]:
    operations = {args[i + 1] for i, word in enumerate(args) if word == "--operation"}
    return operations, [word for word in args if word not in operations and word != "--operation"]


def test_the_broker_enforces_acls_and_denies_what_no_acl_allows() -> None:
    env = yaml.safe_load(COMPOSE.read_text())["services"]["kafka"]["environment"]
    assert env["KAFKA_AUTHORIZER_CLASS_NAME"].endswith("StandardAuthorizer")
    assert env["KAFKA_ALLOW_EVERYONE_IF_NO_ACL_FOUND"] == "false"
    # The only super user is the loopback listeners' principal, which no SASL client can become.
    assert env["KAFKA_SUPER_USERS"] == "User:ANONYMOUS"
    assert "SASL:SASL_PLAINTEXT" in env["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"]


def test_the_chat_producer_writes_chat_turns_and_nothing_else() -> None:
    grants = [_grants(a) for a in _acls()["chat"]]
    assert ({"Write", "Describe"}, ["--topic", "chat.turns"]) in grants
    assert all(ops <= {"Write", "Describe", "IdempotentWrite"} for ops, _ in grants)
    assert all("--topic" not in where or where == ["--topic", "chat.turns"] for _, where in grants)
    assert not any("--group" in where for _, where in grants)


def test_the_subscriber_reads_memory_changes_in_its_own_groups_only() -> None:
    grants = [_grants(a) for a in _acls()["subscriber"]]
    assert all(ops <= {"Read", "Describe"} for ops, _ in grants)
    topics = [where for _, where in grants if "--topic" in where]
    assert topics == [["--topic", "memory.changes"]]
    groups = [where for _, where in grants if "--group" in where]
    assert groups == [["--group", "subscriber", "--resource-pattern-type", "prefixed"]]


def test_memstream_reaches_its_topics_and_groups_but_cannot_change_acls() -> None:
    grants = [_grants(a) for a in _acls()["memstream"]]
    cluster = [ops for ops, where in grants if "--cluster" in where]
    assert cluster == [{"Create", "Describe", "DescribeConfigs", "IdempotentWrite"}]
    topics = {where[1] for _, where in grants if "--topic" in where}
    assert topics == {"memory.", "memstream", "chat.turns"}
