"""Schemathesis over every route of the live service: no 5xx, and every answer as the OpenAPI document says.

Each operation gets its documented examples, then valid and invalid cases
generated from its schema (hypothesis, bounded so the whole run stays well
under two minutes), sent over HTTP to the real server; `call_and_validate`
applies schemathesis' checks: no server error, documented status code,
content type, headers and body schema, bad input refused, good accepted.
Requests carry an operator's API key, so they reach the routes themselves.

The server here has a real broker (tansu, as `memstream up` runs it), so
ingest and memory commands answer as in production; no worker consumes,
so a `?wait=true` write answers 202 after its (shortened) wait.

Three adaptations, all about the tool, not the service:
- schemathesis' own pytest loader (`from_fixture`) reads a pytest attribute
  that pytest 9 removed, so the operations are driven with its documented
  strategy API instead;
- its JSON Schema engine (Rust) cannot compile a regex naming a lone
  surrogate (a Rust string cannot hold one; an example checked against such
  a schema is never valid, so it would be discarded), so the "no lone
  surrogate" clause of ids, metadata strings and message content is dropped
  from its copy of the document;
- the cases it counts valid are kept to what JSON Schema cannot express:
  text without lone surrogates, in NFC (the document states both in
  `x-memstream-validator-only`; tests/api/test_hostile.py sends them), no
  whole float such as 5.0 where only an integer may stand (JSON counts it as
  5, the service's strict models refuse it; tests/unit/test_contract.py), and
  a body within the server's size limit (documented 413); for invalid cases,
  a 413 counts as the refusal it is.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
import traceback
import unicodedata
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.config import ChecksConfig
from schemathesis.core.failures import FailureGroup
from schemathesis.core.result import Ok

from ops.embedded.broker import broker_argv
from ops.embedded.supervision import Child
from ops.topics import create_topics, load_specs
from schemas.validation import LONE_SURROGATE, has_surrogate
from services.auth import Role
from services.core.config import Settings
from tests.api.conftest import ServerThread, create_key
from tests.pg import PgServer

ROOT = Path(__file__).resolve().parents[2]
# The key is ours to send (`with-security-parameters` off: schemathesis still probes a request without it).
# Unknown query parameters are ignored, as OpenAPI leaves them; schemathesis would count one as invalid input.
# A body over the server's size limit is refused before it is read: 413 (documented) is a refusal too.
CONFIG = schemathesis.Config.from_dict(
    {
        "generation": {"with-security-parameters": False, "allow-extra-parameters": False},
        "checks": {
            "negative_data_rejection": {
                "expected-statuses": [*ChecksConfig.from_dict({}).negative_data_rejection.expected_statuses, "413"]
            }
        },
    }
)
MAX_EXAMPLES = 15
# Latency is for `make bench`: the server answers 503 past its own 2 s deadline; this only catches a hung one.
CLIENT_TIMEOUT = 60
# An operator key must name the tenant (documented on `tenant_id`); generated cases that leave
# an optional one out get this one.
TENANT = "acme"


@dataclass(frozen=True)
class Live:
    base_url: str
    operator_key: str
    max_body_bytes: int


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_listening(port: int, broker: Child, within: float = 60.0) -> None:
    deadline = time.monotonic() + within
    while True:
        assert broker.alive(), broker.log_path.read_text()
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            assert time.monotonic() < deadline, "the broker did not listen"
            time.sleep(0.1)


@pytest.fixture(scope="module")
def live(api_pg: PgServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    data_dir = Path(tmp_path_factory.mktemp("conformance"))
    port = _free_port()
    bootstrap = f"127.0.0.1:{port}"
    broker = Child("broker", broker_argv(bootstrap), data_dir)
    broker.start()
    try:
        _wait_listening(port, broker)
        asyncio.run(create_topics(bootstrap, load_specs(ROOT / "topics.yaml")))
        settings = Settings(
            data_dir=data_dir,
            pg_dsn=api_pg.database(),
            kafka_bootstrap=bootstrap,
            embed_threads=1,
            command_wait_timeout=0.3,
        )
        thread = ServerThread(settings)
        thread.start()
        try:
            thread.wait_started(120)
            _, key = create_key(thread, None, Role.ADMIN, "schemathesis operator")
            yield Live(f"http://127.0.0.1:{thread.port}", key, settings.http_max_body_bytes)
        finally:
            thread.stop()
    finally:
        broker.stop()


def _without_surrogate_clauses(node: Any) -> Any:
    """An id's forbidden pattern loses its lone-surrogate alternative; a `not` that is only that clause goes."""
    if isinstance(node, dict):
        return {
            key: value.replace(f"|{LONE_SURROGATE}", "") if key == "pattern" else _without_surrogate_clauses(value)
            for key, value in node.items()
            if not (key == "not" and value == {"pattern": LONE_SURROGATE})
        }
    if isinstance(node, list):
        return [_without_surrogate_clauses(item) for item in node]
    return node


def _expressible(value: Any) -> bool:
    """No lone surrogate and NFC, in every string of a value."""
    if isinstance(value, str):
        return not has_surrogate(value) and unicodedata.is_normalized("NFC", value)
    if isinstance(value, dict):
        return all(_expressible(k) and _expressible(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return all(_expressible(item) for item in value)
    return True


def _alternatives(document: dict[str, Any], schemas: list[Any]) -> list[dict[str, Any]]:
    """The schemas a value in one place may meet: each resolved, with its anyOf/oneOf/allOf branches."""
    found: list[dict[str, Any]] = []
    pending = [schema for schema in schemas if isinstance(schema, dict)]
    while pending:
        node = _resolve(document, pending.pop())
        found.append(node)
        pending.extend(branch for key in ("anyOf", "oneOf", "allOf") for branch in node.get(key, []))
    return found


def _types(node: dict[str, Any]) -> set[Any]:
    kind = node.get("type")
    return set(kind) if isinstance(kind, list) else {kind}


def _member(node: dict[str, Any], key: str) -> Any:
    properties = node.get("properties", {})
    return properties[key] if key in properties else node.get("additionalProperties")


def _whole_float_as_integer(document: dict[str, Any], value: Any, schemas: list[Any]) -> bool:
    """A float such as 5.0 where only an integer may stand: JSON Schema's data model counts it as the integer 5,
    the service's models are strict and refuse it (the contract's fields say so in `x-memstream-validator-only`)."""
    alternatives = _alternatives(document, schemas)
    if isinstance(value, float):
        types = set().union(*map(_types, alternatives))
        return value.is_integer() and "integer" in types and "number" not in types
    if isinstance(value, dict):
        return any(
            _whole_float_as_integer(document, item, [_member(node, key) for node in alternatives])
            for key, item in value.items()
        )
    if isinstance(value, list):
        return any(
            _whole_float_as_integer(document, item, [node.get("items") for node in alternatives]) for item in value
        )
    return False


def _valid_as_documented(document: dict[str, Any], max_body_bytes: int, case: schemathesis.Case) -> bool:
    """A case schemathesis counts valid (a negative round makes some too) is valid by the rules JSON Schema cannot
    express as well (see the module docstring); a case it means to be invalid is left as it is."""
    if case.meta is not None and not case.meta.generation.mode.is_positive:
        return True
    # Path parameters come percent-encoded from generation already; the rules are about the text they carry.
    path = {
        name: unquote(value) if isinstance(value, str) else value
        for name, value in (case.path_parameters or {}).items()
    }
    parts = (path, case.query, case.body if isinstance(case.body, dict | list | str) else None)
    operation = document["paths"][case.operation.path][case.operation.method.lower()]
    content = operation.get("requestBody", {}).get("content", {})
    body_schema = content.get(case.media_type, {}).get("schema")
    # JSON Schema cannot bound the size of a whole body either (413, documented); sent as requests encodes it.
    fits = not isinstance(case.body, dict | list) or len(json.dumps(case.body).encode()) <= max_body_bytes
    return (
        fits
        and all(_expressible(part) for part in parts)
        and not _whole_float_as_integer(document, case.body, [body_schema])
    )


def _document(live: Live) -> dict[str, Any]:
    document: dict[str, Any] = httpx.get(f"{live.base_url}/openapi.json").json()
    return document


def _with_tenant(case: schemathesis.Case) -> schemathesis.Case:
    """Two rules of `tenant_id` the document states in words: an operator's key must name a tenant (an optional
    `tenant_id` left out everywhere gets TENANT), and query and body must not name two (the query takes the body's)."""
    if not any(parameter.name == "tenant_id" for parameter in case.operation.query):
        return case
    in_body = case.body.get("tenant_id") if isinstance(case.body, dict) else None
    in_query = (case.query or {}).get("tenant_id")
    if in_query is None or (in_body is not None and in_body != in_query):
        case.query = {**(case.query or {}), "tenant_id": in_body if in_body is not None else TENANT}
    return case


def _takes_input(operation: schemathesis.APIOperation) -> bool:
    return bool(list(operation.iter_parameters())) or bool(operation.body)


def _cases(
    documented: Callable[[schemathesis.Case], bool],
    schema: schemathesis.BaseSchema,
    operation: schemathesis.APIOperation,
    mode: GenerationMode | None,
) -> st.SearchStrategy[schemathesis.Case] | None:
    if mode is not None:
        # Without parameters or body there is nothing to make invalid: the examples round calls it.
        if not (_takes_input(operation) or mode.is_positive):
            return None
        return operation.as_strategy(generation_mode=mode).map(_with_tenant).filter(documented)
    if not _takes_input(operation):
        return st.just(operation.Case())
    examples = schema.get_strategies_from_examples(operation)
    # Parameters an example leaves out are generated: they too must be expressible (NFC, no lone surrogate).
    return st.one_of(examples).map(_with_tenant).filter(documented) if examples else None


def _described(exc: BaseException) -> str:
    """An exception with every one it groups (a failure hypothesis could not reproduce names its first only there)."""
    if isinstance(exc, BaseExceptionGroup):
        return "".join(traceback.format_exception(exc, limit=0))
    return f"{exc}"


def _failures(live: Live, mode: GenerationMode | None) -> list[str]:
    document = _document(live)
    schema = schemathesis.openapi.from_dict(_without_surrogate_clauses(document), config=CONFIG)
    documented = partial(_valid_as_documented, document, live.max_body_bytes)
    # An operator's key: every tenant is reachable, so cases go past the gate. Spelled as the
    # security scheme names it: schemathesis strips it by that name to probe that the key is required.
    auth = {"Authorization": f"Bearer {live.operator_key}"}
    found: list[str] = []
    operations = [result.ok() for result in schema.get_all_operations() if isinstance(result, Ok)]
    assert len(operations) >= 7, "every route must be in the document"
    for operation in operations:
        cases = _cases(documented, schema, operation, mode)
        if cases is None:
            if mode is None:
                found.append(f"{operation.label}: no usable example in the document")
            continue

        @settings(max_examples=MAX_EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck))
        @given(case=cases)
        def check(case: schemathesis.Case) -> None:
            case.call_and_validate(base_url=live.base_url, headers=auth, timeout=CLIENT_TIMEOUT)

        try:
            check()
        # every operation is tried; all failures are reported together (a FailureGroup is a BaseExceptionGroup)
        except (Exception, FailureGroup) as exc:
            found.append(f"{operation.label}: {_described(exc)}")
    return found


@pytest.mark.parametrize(
    "mode", [None, GenerationMode.POSITIVE, GenerationMode.NEGATIVE], ids=["examples", "positive", "negative"]
)
def test_every_route_conforms_to_its_openapi(live: Live, mode: GenerationMode | None) -> None:
    failures = _failures(live, mode)
    assert not failures, "\n\n".join(failures)


def _resolve(document: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in node:
        name = node["$ref"].rsplit("/", 1)[-1]
        node = document["components"]["schemas"][name]
    return node


def _has_example(document: dict[str, Any], content: dict[str, Any]) -> bool:
    return any(
        "example" in media or "examples" in media or "examples" in _resolve(document, media.get("schema", {}))
        for media in content.values()
    )


def test_every_route_is_documented(live: Live) -> None:
    """Tag, summary, an example of its input and of its answer, and errors in the one error model."""
    document = _document(live)
    described = {tag["name"] for tag in document.get("tags", []) if tag.get("description")}
    missing: list[str] = []
    for path, item in document["paths"].items():
        for method, operation in item.items():
            label = f"{method.upper()} {path}"
            if not operation.get("tags") or not operation.get("summary"):
                missing.append(f"{label}: tag or summary")
            missing.extend(f"{label}: tag {tag} not described" for tag in set(operation.get("tags", [])) - described)
            body = operation.get("requestBody", {}).get("content")
            if body is not None and not _has_example(document, body):
                missing.append(f"{label}: request body example")
            for parameter in operation.get("parameters", []):
                if parameter.get("required") and not ("example" in parameter or "examples" in parameter):
                    missing.append(f"{label}: example of parameter {parameter['name']}")
            success = next((a for status, a in operation["responses"].items() if status.startswith("2")), None)
            content = (success or {}).get("content", {})
            if "application/json" in content and not _has_example(document, content):
                missing.append(f"{label}: response example")
            for status, answer in operation["responses"].items():
                if status[0] in "45" and path != "/readyz":
                    ref = answer.get("content", {}).get("application/json", {}).get("schema", {}).get("$ref", "")
                    if not ref.endswith("/ErrorBody"):
                        missing.append(f"{label}: {status} not documented as ErrorBody")
            if path.startswith("/v1/") and not {"401", "403", "422", "500", "503"} <= set(operation["responses"]):
                missing.append(f"{label}: common error statuses")
    assert not missing, "\n".join(missing)
