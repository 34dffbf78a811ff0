"""The image's build context and layer order, read from `.dockerignore` and the Dockerfile (no Docker engine here).

The context must never carry `.memstream/` (API and master keys, secrets,
data) or a local `.venv`; the lock file must be installed before the
source is copied, so a source edit does not reinstall every dependency.
"""

from __future__ import annotations

import fnmatch
import shlex
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ("agents", "schemas", "services", "ops")


def ignore_patterns(text: str) -> list[str]:
    lines = (line.strip() for line in text.splitlines())
    return [line for line in lines if line and not line.startswith("#")]


def _matches(pattern: str, path: str) -> bool:
    """Docker's rule, as far as these patterns use it: from the context root, `**/` any depth, a directory covers its contents."""
    pattern = pattern.strip("/")
    parts = path.split("/")
    prefixes = ["/".join(parts[: n + 1]) for n in range(len(parts))]
    if pattern.startswith("**/"):
        tail = pattern[3:]
        return any(fnmatch.fnmatchcase(part, tail) for part in parts) or any(
            fnmatch.fnmatchcase("/".join(parts[i:j]), tail)
            for i in range(len(parts))
            for j in range(i + 1, len(parts) + 1)
        )
    return any(fnmatch.fnmatchcase(prefix, pattern) for prefix in prefixes)


def ignored(path: str, patterns: list[str]) -> bool:
    """The last pattern that matches decides; `!` re-includes."""
    verdict = False
    for pattern in patterns:
        negated = pattern.startswith("!")
        if _matches(pattern.lstrip("!"), path):
            verdict = not negated
    return verdict


def instructions(dockerfile: str) -> list[tuple[str, list[str]]]:
    """(instruction, arguments) per instruction, continuation lines joined."""
    joined = dockerfile.replace("\\\n", " ")
    out = []
    for line in joined.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), shlex.split(rest)))
    return out


def test_the_build_context_leaves_out_keys_data_and_local_environments() -> None:
    patterns = ignore_patterns((ROOT / ".dockerignore").read_text())
    for path in (
        ".memstream",
        ".memstream/api-key",
        ".memstream/auth-secret",
        ".memstream/pg/base/1",
        ".venv/bin/python",
        ".git/config",
        "bench-results/run.json",
        "services/__pycache__/cli.cpython-311.pyc",
        ".pytest_cache/v/cache",
        "tests/conftest.py",
    ):
        assert ignored(path, patterns), path
    for path in ("requirements.lock", "pyproject.toml", "README.md", "topics.yaml", "services/cli", "ops/scram.py"):
        assert not ignored(path, patterns), path


def test_the_matcher_reads_patterns_as_docker_does() -> None:
    """The checks above mean something only if the matcher can say no and honours exceptions."""
    assert not ignored(".memstream/api-key", [".venv"])
    assert ignored("a/b/x.pyc", ["**/*.pyc"])
    assert not ignored("keep.pyc", ["*.pyc", "!keep.pyc"])


def test_the_lock_file_is_installed_before_the_source_is_copied() -> None:
    steps = instructions((ROOT / "Dockerfile").read_text())
    copies = [(n, args) for n, (word, args) in enumerate(steps) if word in ("COPY", "ADD")]
    lock_copy = next(n for n, args in copies if "requirements.lock" in args[:-1])
    lock_install = next(
        n for n, (word, args) in enumerate(steps) if word == "RUN" and "requirements.lock" in args and n > lock_copy
    )
    source_copies = [n for n, args in copies if any(a.strip("./") in SOURCE or a in (".", "./") for a in args[:-1])]
    assert source_copies, "the Dockerfile copies no source"
    assert lock_copy < lock_install < min(source_copies)
    # The dependency layer's inputs are the lock file alone (and what it needs), not the working tree.
    assert copies[0][0] == lock_copy
    assert set(copies[0][1][:-1]) == {"requirements.lock"}
