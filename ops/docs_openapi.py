"""The HTTP API reference page, written from the read service's own OpenAPI document.

The document is built from the FastAPI app itself (no live stores: the app's
pools open lazily), so the page lists exactly the routes, fields and errors
the service answers with, and cannot drift from them.
"""

from __future__ import annotations

import json
import tempfile
from typing import Any

from services.api import docs as api_docs

METHODS = ("get", "post", "put", "patch", "delete")


def openapi_document() -> dict[str, Any]:
    """The read service's OpenAPI document, as `GET /openapi.json` serves it."""
    # Imported here: building the app pulls in every adapter, which only the docs build needs.
    from services.api.app import create_app
    from services.api.health import Readiness
    from services.core.config import Settings
    from services.runtime import Runtime

    # A throwaway data dir: the auth gate writes its secret there on first use.
    with tempfile.TemporaryDirectory() as data_dir:
        rt = Runtime.create(Settings(data_dir=data_dir))
        spec: dict[str, Any] = create_app(rt, Readiness(rt)).openapi()
    return spec


def _cell(text: object) -> str:
    """One table cell: no line breaks or bare pipes."""
    return " ".join(str(text).split()).replace("|", "\\|")


def schema_type(schema: dict[str, Any]) -> str:
    """A short, readable type: `string`, `array of Memory`, `integer | null`, `"add" | "correct"`."""
    if "$ref" in schema:
        name = str(schema["$ref"]).rsplit("/", 1)[-1]
        return f"[{name}](#{name.lower()})"
    if "const" in schema:
        return json.dumps(schema["const"])
    if "enum" in schema:
        return " \\| ".join(json.dumps(v) for v in schema["enum"])
    for key in ("anyOf", "oneOf", "allOf"):
        if key in schema:
            return " \\| ".join(schema_type(s) for s in schema[key])
    kind = schema.get("type", "any")
    if kind == "array":
        return f"array of {schema_type(schema.get('items', {}))}"
    if kind == "object" and isinstance(schema.get("additionalProperties"), dict):
        return f"object of {schema_type(schema['additionalProperties'])}"
    fmt = schema.get("format")
    return f"{kind} ({fmt})" if fmt else str(kind)


def _body_schema(content: dict[str, Any]) -> str:
    parts = [f"`{media}`: {schema_type(body.get('schema', {}))}" for media, body in content.items()]
    return "; ".join(parts) or "—"


def _operation(path: str, method: str, op: dict[str, Any], shared: list[dict[str, Any]]) -> list[str]:
    out = [f"### `{method.upper()} {path}`", ""]
    if op.get("summary"):
        out += [f"**{op['summary']}**", ""]
    if op.get("description"):
        out += [op["description"].strip(), ""]
    if op.get("security"):
        out += ["Needs `Authorization: Bearer <API key>`.", ""]
    params = shared + op.get("parameters", [])
    if params:
        out += ["| parameter | in | required | type | description |", "|---|---|---|---|---|"]
        for p in params:
            required = "yes" if p.get("required") else "no"
            desc = p.get("description") or p.get("schema", {}).get("description", "")
            out.append(
                f"| `{p['name']}` | {p['in']} | {required} | {schema_type(p.get('schema', {}))} | {_cell(desc)} |"
            )
        out.append("")
    body = op.get("requestBody")
    if body:
        out += [f"Request body: {_body_schema(body.get('content', {}))}", ""]
    out += ["| status | meaning | body |", "|---|---|---|"]
    for status, resp in op.get("responses", {}).items():
        out.append(f"| {status} | {_cell(resp.get('description', ''))} | {_body_schema(resp.get('content', {}))} |")
    return [*out, ""]


def _schemas(components: dict[str, Any]) -> list[str]:
    out = ["## Schemas", ""]
    for name, schema in sorted(components.get("schemas", {}).items()):
        out += [f"### {name}", ""]
        if schema.get("description"):
            out += [schema["description"].strip(), ""]
        props = schema.get("properties")
        if props:
            required = set(schema.get("required", []))
            out += ["| field | type | required | description |", "|---|---|---|---|"]
            for field, sub in props.items():
                out.append(
                    f"| `{field}` | {schema_type(sub)} | {'yes' if field in required else 'no'} "
                    f"| {_cell(sub.get('description', ''))} |"
                )
            out.append("")
        elif "type" in schema or "enum" in schema:
            out += [f"Type: {schema_type(schema)}", ""]
    return out


def render_api(spec: dict[str, Any]) -> str:
    """The reference page: the service's description, then each tag's operations, then every schema."""
    info = spec.get("info", {})
    out = [
        "# HTTP API reference",
        "",
        f"Generated at build time from the read service's OpenAPI document (version {info.get('version', '?')}); "
        "the document itself is [openapi.json](openapi.json), and a running service serves it at "
        "`/openapi.json` and interactive pages at `/docs`.",
        "",
        info.get("description", "").strip(),
        "",
    ]
    tags = [t["name"] for t in spec.get("tags", api_docs.TAGS)]
    by_tag: dict[str, list[list[str]]] = {t: [] for t in tags}
    for path, item in spec.get("paths", {}).items():
        shared = item.get("parameters", [])
        for method in METHODS:
            if method in item:
                op = item[method]
                tag = (op.get("tags") or ["other"])[0]
                by_tag.setdefault(tag, []).append(_operation(path, method, op, shared))
    descriptions = {t["name"]: t.get("description", "") for t in spec.get("tags", [])}
    for tag, ops in by_tag.items():
        if not ops:
            continue
        out += [f"## {tag.capitalize()}", ""]
        if descriptions.get(tag):
            out += [descriptions[tag], ""]
        for lines in ops:
            out += lines
    out += _schemas(spec.get("components", {}))
    return "\n".join(out).rstrip() + "\n"
