"""Reference pages written from the code that defines them: every setting, every topic.

Settings come from `services.core.config.Settings`: the type and default from
the class, the explanation from the comment above each field (the source is the
one place they are written), grouped under its `# --- section ---` comments.
Topics come from topics.yaml, which `memstream topics create` reads.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

import yaml
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from services.core import config

# Comments in the source point at sections of the old single-page guide; the pages say it by their links.
_GUIDE_REF = re.compile(r"\s*\((?:README|docs/)[^)]*\)")
_SECTION = re.compile(r"#\s*---\s*(.*?)\s*---\s*$")


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _default(info: FieldInfo) -> str:
    value: Any = info.default
    if value is PydanticUndefined and info.default_factory is not None:
        value = info.default_factory()  # type: ignore[call-arg]
    if value is None:
        return "unset"
    if isinstance(value, Path):
        value = str(value)
    return f"`{value!r}`" if isinstance(value, str) else f"`{value}`"


def _bounds(info: FieldInfo) -> str:
    """`gt`/`ge`/`le`/`lt` constraints, as `> 0, ≤ 1`."""
    signs = {"gt": ">", "ge": "≥", "lt": "<", "le": "≤"}
    found = [f"{sign} {getattr(m, attr)}" for m in info.metadata for attr, sign in signs.items() if hasattr(m, attr)]
    return ", ".join(found)


def _fields_with_comments(source: str) -> list[tuple[str | None, str, str, str]]:
    """(section, field, annotation, comment) for each field of Settings, in source order.

    A field's comment is the run of comment lines right above it. Fields the
    source groups under one comment get it on the first only: which of the
    fields below a comment it covers is not written down anywhere.
    """
    lines = source.splitlines()
    tree = ast.parse(source)
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Settings")
    rows: list[tuple[str | None, str, str, str]] = []
    section: str | None = None
    previous_end = cls.lineno
    for node in cls.body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            previous_end = node.end_lineno or node.lineno
            continue
        comment: list[str] = []
        for raw in lines[previous_end : node.lineno - 1]:
            text = raw.strip()
            heading = _SECTION.match(text)
            if heading:
                section, comment = _GUIDE_REF.sub("", heading.group(1)), []
            elif text.startswith("#"):
                comment.append(text.lstrip("#").strip())
            else:  # a blank line ends the comment of the fields before it
                comment = []
        previous_end = node.end_lineno or node.lineno
        text = _GUIDE_REF.sub("", " ".join(comment))
        rows.append((section, node.target.id, ast.unparse(node.annotation), text))
    return rows


def _section_heading(section: str) -> list[str]:
    """`recall quality. Defaults tuned ...` → a heading `Recall quality` and the rest as its paragraph."""
    cut = min((i for i in (section.find(". "), section.find("; "), section.find(" (")) if i > 0), default=len(section))
    title, rest = section[:cut], section[cut:].lstrip(".; ").strip()
    if rest.startswith("(") and rest.endswith(")"):
        rest = f"Code: {rest[1:-1]}."
    out = [f"## {title[:1].upper()}{title[1:]}", ""]
    if rest:
        out += [f"{rest[:1].upper()}{rest[1:]}", ""]
    return out


def render_settings() -> str:
    """The configuration reference: one table per section of the settings class."""
    prefix = str(config.Settings.model_config.get("env_prefix", ""))
    fields = config.Settings.model_fields
    out = [
        "# Configuration reference",
        "",
        f"Generated at build time from `services/core/config.py`. Every setting is read from an environment "
        f"variable: the field name in upper case after the prefix `{prefix}`. A process reads them once at "
        "start; `memstream up` passes its environment to every process it starts. See "
        "[Configuration](../operations/configuration.md) for the settings most deployments touch.",
        "",
    ]
    current: str | None = "start"
    for section, name, annotation, comment in _fields_with_comments(Path(config.__file__).read_text()):
        if section != current:
            current = section
            out += _section_heading(section or "general")
            out += ["| variable | type | default | meaning |", "|---|---|---|---|"]
        info = fields[name]
        bounds = _bounds(info)
        meaning = (_cell(comment) or "—") + (f" ({bounds})" if bounds else "")
        env = f"{prefix}{name}".upper()
        out.append(f"| `{env}` | `{_cell(annotation)}` | {_default(info)} | {meaning} |")
    return "\n".join(out).rstrip() + "\n"


def _retention(ms: Any) -> str:
    if ms is None:
        return "broker default"
    if int(ms) < 0:
        return "forever"
    days = int(ms) / 86_400_000
    return f"{days:g} days" if days >= 1 else f"{int(ms) / 3_600_000:g} hours"


def render_topics(topics_file: Path) -> str:
    """The topics page: every topic in topics.yaml with its partitions, retention, key and who writes and reads it."""
    data = yaml.safe_load(topics_file.read_text())
    out = [
        "# Topics",
        "",
        "Generated at build time from `topics.yaml`, the file `memstream topics create` reads (it creates "
        "every topic, idempotently; nothing creates topics ad hoc). Every record is keyed by tenant and user, "
        "so one user's records stay in order.",
        "",
        "| topic | partitions | retention | key | producers | consumers | schema |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, topic in data.get("topics", {}).items():
        schema = str(topic.get("schema", "")).replace(" | ", ", ")
        out.append(
            f"| `{name}` | {topic.get('partitions', '')} | {_retention(topic.get('retention_ms'))} "
            f"| `{topic.get('key', '')}` | {_cell(', '.join(topic.get('producers', [])))} "
            f"| {_cell(', '.join(topic.get('consumers', [])))} | {_cell(schema)} |"
        )
    return "\n".join(out) + "\n"
