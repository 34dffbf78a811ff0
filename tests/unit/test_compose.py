"""docker-compose.yml, read as YAML (no Docker engine here): workers scale as one service, nothing starts early."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

from services.core.stages import parse_stages

COMPOSE = Path(__file__).resolve().parents[2] / "docker-compose.yml"


@pytest.fixture(scope="module")
def services() -> dict[str, Any]:
    found: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())["services"]
    return found


def _env(service: dict[str, Any]) -> dict[str, Any]:
    env: dict[str, Any] = service.get("environment", {})
    return env


def test_the_worker_is_one_scalable_service_against_kafka_postgres_and_qdrant(services: dict[str, Any]) -> None:
    worker = services["worker"]
    assert worker["deploy"]["replicas"] >= 2
    # `--scale worker=N` needs replicas that can coexist: no fixed name, no host port.
    assert "container_name" not in worker
    assert "ports" not in worker
    assert shlex.split(worker["command"])[:2] == ["memstream", "worker"]
    env = _env(worker)
    assert env["MEMSTREAM_KAFKA_BOOTSTRAP"] == "kafka:9092"
    assert env["MEMSTREAM_PG_DSN"].startswith("postgresql://memstream@postgres:")
    # A Qdrant server, never the in-process Edge shard (which would have one owner per replica).
    assert env["MEMSTREAM_QDRANT_URL"] == "http://qdrant:6333"
    assert services["kafka"]["image"].startswith("apache/kafka:")
    assert services["postgres"]["image"].startswith("pgvector/pgvector:")
    assert services["qdrant"]["image"].startswith("qdrant/qdrant:")


def test_workers_and_api_wait_for_healthy_stores(services: dict[str, Any]) -> None:
    for name, needs in (("worker", ("kafka", "postgres", "qdrant")), ("api", ("postgres", "qdrant"))):
        depends = services[name]["depends_on"]
        for store in needs:
            assert depends[store] == {"condition": "service_healthy"}, f"{name} does not wait for {store}"
        assert depends["prestart"] == {"condition": "service_completed_successfully"}


def test_every_service_waited_on_as_healthy_has_a_health_check(services: dict[str, Any]) -> None:
    waited = {
        dep
        for service in services.values()
        if isinstance(service.get("depends_on"), dict)
        for dep, how in service["depends_on"].items()
        if how.get("condition") == "service_healthy"
    }
    assert {"kafka", "postgres", "qdrant"} <= waited
    for name in waited:
        check = services[name].get("healthcheck", {}).get("test")
        assert check, f"{name} is waited on as healthy but has no healthcheck"


def test_the_worker_and_qdrant_checks_probe_the_service_itself(services: dict[str, Any]) -> None:
    assert "localhost:9464/metrics" in " ".join(services["worker"]["healthcheck"]["test"])
    # The Qdrant image has no curl or wget: the probe is bash alone, and it asks /readyz for a 200.
    qdrant = services["qdrant"]["healthcheck"]["test"]
    assert qdrant[:3] == ["CMD", "bash", "-c"]
    assert "/dev/tcp/127.0.0.1/6333" in qdrant[3]
    assert "GET /readyz" in qdrant[3]


def test_every_stage_list_in_the_file_is_valid(services: dict[str, Any]) -> None:
    """A `--stages` in any command (a stage split out as its own service) names real stages."""
    for name, service in services.items():
        command = service.get("command")
        if not isinstance(command, str) or "--stages" not in command:
            continue
        words = shlex.split(command)
        parse_stages(words[words.index("--stages") + 1])  # raises UnknownStage
        assert words[:2] == ["memstream", "worker"], name


def test_every_memstream_container_shares_the_master_key_and_the_auth_secret(services: dict[str, Any]) -> None:
    # Each container has its own data dir: a key generated there would differ per container (MasterKeyMismatch).
    for name in ("prestart", "worker", "generation-worker", "api"):
        env = _env(services[name])
        assert env["MEMSTREAM_MASTER_KEY"].startswith("${MEMSTREAM_MASTER_KEY:?"), name
        assert env["MEMSTREAM_AUTH_SECRET"].startswith("${MEMSTREAM_AUTH_SECRET:?"), name


def test_a_generation_worker_is_optional_and_names_its_generation(services: dict[str, Any]) -> None:
    follower = services["generation-worker"]
    assert follower["profiles"] == ["generation"]  # not started by a plain `docker compose up`
    assert "MEMSTREAM_GENERATION" in _env(follower)
    assert shlex.split(follower["command"]) == ["memstream", "worker"]


def test_qdrant_requires_the_api_key_every_memstream_container_sends(services: dict[str, Any]) -> None:
    key = "${MEMSTREAM_QDRANT_API_KEY:?"
    assert _env(services["qdrant"])["QDRANT__SERVICE__API_KEY"].startswith(key)
    for name in ("prestart", "worker", "generation-worker", "api"):
        assert _env(services[name])["MEMSTREAM_QDRANT_API_KEY"].startswith(key), name
