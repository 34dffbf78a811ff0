"""Memory commands end to end, on a stack of its own: HTTP → memory.commands → commands stage → Postgres,
memory.changes → Qdrant, and back through recall, list, history and export; the CLI; forgetting a user; and a
property: whatever two users do, no answer for one holds the other's data.

The stack's request deadline is raised (MEMSTREAM_HTTP_REQUEST_TIMEOUT) so `?wait=true` may wait its full
MEMSTREAM_COMMAND_WAIT_TIMEOUT on this shared, busy machine.
"""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.changes import stack_changes
from tests.stack import Stack, embedded_stack, produce, run_cli, stack_settings, turn, user_path, wait_for
from tests.user_rows import rows_naming

pytestmark = pytest.mark.e2e
TENANT = "cmd-acme"
WAIT = {"wait": "true"}


@pytest.fixture(scope="module")
def cmd_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    slow_ok = {"MEMSTREAM_HTTP_REQUEST_TIMEOUT": "15", "MEMSTREAM_COMMAND_WAIT_TIMEOUT": "12"}
    with embedded_stack(Path(tmp_path_factory.mktemp("commands")), extra_env=slow_ok) as running:
        yield running


def new_user() -> str:
    return f"user-{uuid.uuid4().hex[:8]}"


def users(user: str) -> str:
    return f"/v1/users/{user_path(user)}"


def call(stack: Stack, method: str, path: str, *, tenant: str = TENANT, **kwargs: Any) -> httpx.Response:
    params = {"tenant_id": tenant, **kwargs.pop("params", {})}
    return stack.request(method, path, params=params, **kwargs)


def applied(response: httpx.Response) -> dict[str, Any]:
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    assert body["status"] == "applied"
    return body


def recalled(stack: Stack, user: str, query: str, tenant: str = TENANT) -> list[str]:
    return [m["text"] for m in stack.recall(tenant, user, query, record_access=False)["memories"]]


def listed(stack: Stack, user: str, tenant: str = TENANT, **params: Any) -> list[dict[str, Any]]:
    response = call(stack, "GET", f"{users(user)}/memories", tenant=tenant, params={"limit": 1000, **params})
    assert response.status_code == 200, response.text
    found: list[dict[str, Any]] = response.json()["memories"]
    return found


def settled(stack: Stack, user: str, at_least: int) -> list[dict[str, Any]]:
    """The user's memories once the pipeline is done with what was produced: at least this many, unchanged for 3 s."""
    seen: list[Any] = []

    def still() -> list[dict[str, Any]] | None:
        now = listed(stack, user)
        seen.append(sorted((m["id"], m["version"], m["status"]) for m in now))
        return now if len(now) >= at_least and len(seen) >= 4 and all(s == seen[-1] for s in seen[-4:]) else None

    return wait_for(still, 90, "the pipeline settled", interval=1.0)


async def changes_caused_by(stack: Stack, command_id: str) -> list[dict[str, Any]]:
    """The changes on memory.changes whose cause names the command, opened as subscribers open them."""

    def caused(found: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [c for c in found if command_id in c.get("cause", [])]

    return caused(await stack_changes(stack_settings(stack), lambda found: bool(caused(found))))


async def test_add_correct_delete_each_readable_at_once_with_history_and_on_memory_changes(cmd_stack: Stack) -> None:
    stack, user = cmd_stack, new_user()
    body = {"type": "episode", "text": "Hiked the Zugspitze ridge with a borrowed ice axe"}
    accepted = call(stack, "POST", f"{users(user)}/memories", json=body)
    assert accepted.status_code == 202
    receipt = accepted.json()
    assert receipt["status"] == "accepted"
    assert receipt["kind"] == "add"
    wait_for(lambda: any(m["id"] == receipt["memory_id"] for m in listed(stack, user)), 60, "the add applied")

    # With ?wait=true the write is readable through the index as soon as the answer arrives.
    note = applied(
        call(stack, "POST", f"{users(user)}/memories", params=WAIT, json={**body, "text": "Owns a red kayak"})
    )
    assert [c["op"] for c in note["changes"]] == ["added"]
    assert "Owns a red kayak" in recalled(stack, user, "what boat does the user own?")
    manual = next(m for m in listed(stack, user) if m["id"] == note["memory_id"])
    assert manual["source"]["metadata"][0]["source"] == "manual"
    assert manual["source"]["session_id"] == "manual"

    fixed = applied(
        call(
            stack,
            "PATCH",
            f"{users(user)}/memories/{note['memory_id']}",
            params=WAIT,
            json={"text": "Owns a blue canoe"},
        )
    )
    assert {(c["id"], c["op"]) for c in fixed["changes"]} == {
        (note["memory_id"], "superseded"),
        (fixed["memory_id"], "added"),
    }
    boats = recalled(stack, user, "what boat does the user own?")
    assert "Owns a blue canoe" in boats
    assert "Owns a red kayak" not in boats
    history = call(stack, "GET", f"{users(user)}/memories/{fixed['memory_id']}/history").json()["chain"]
    assert [(h["text"], h["status"]) for h in history] == [
        ("Owns a red kayak", "superseded"),
        ("Owns a blue canoe", "active"),
    ]

    gone = applied(call(stack, "DELETE", f"{users(user)}/memories/{fixed['memory_id']}", params=WAIT))
    assert [c["op"] for c in gone["changes"]] == ["deleted"]
    assert not any("canoe" in t for t in recalled(stack, user, "what boat does the user own?"))
    assert fixed["memory_id"] not in {m["id"] for m in listed(stack, user, status="active")}
    assert next(m for m in listed(stack, user) if m["id"] == fixed["memory_id"])["status"] == "deleted"
    on_log = await changes_caused_by(stack, gone["command_id"])
    assert [(c["op"], c["record"]["id"], c["vector"]) for c in on_log] == [("deleted", fixed["memory_id"], None)]
    # What is deleted is a 409 now, an unknown id a 404.
    assert call(stack, "DELETE", f"{users(user)}/memories/{fixed['memory_id']}").status_code == 409
    assert call(stack, "DELETE", f"{users(user)}/memories/{uuid.uuid4()}").status_code == 404


async def test_deleting_a_sessions_memories_and_a_topics(cmd_stack: Stack) -> None:
    stack, user = cmd_stack, new_user()
    await produce(
        stack.bootstrap,
        [
            turn(TENANT, user, "s1", 0, "I prefer window seats when I fly."),
            turn(TENANT, user, "s2", 0, "I love green tea."),
        ],
    )
    settled(stack, user, 2)
    add = {"type": "preference", "text": "Drinks green tea every morning", "entities": ["Matcha"]}
    applied(call(stack, "POST", f"{users(user)}/memories", params=WAIT, json=add))

    by_session = applied(call(stack, "DELETE", f"{users(user)}/sessions/s1/memories", params=WAIT))
    assert by_session["changes"]
    assert {c["op"] for c in by_session["changes"]} == {"deleted"}
    assert not [m for m in listed(stack, user, status="active") if m["source"]["session_id"] == "s1"]
    by_topic = applied(call(stack, "DELETE", f"{users(user)}/memories", params={**WAIT, "topic": "green tea"}))
    assert len(by_topic["changes"]) >= 2  # the stated preference and the manual one
    left = [m["text"] for m in listed(stack, user, status="active")]
    assert not any("tea" in t.lower() for t in left), left
    assert not any("tea" in t.lower() for t in recalled(stack, user, "what does the user drink?"))
    assert call(stack, "DELETE", f"{users(user)}/memories", params={"topic": "green tea"}).status_code == 404


def normalized(doc: dict[str, Any]) -> Any:
    def strip(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k not in ("tenant_id", "user_id", "exported_at")}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value

    return strip(doc)


def unknown_user_answers(stack: Stack, user: str, tenant: str = TENANT) -> dict[str, Any]:
    """What every route answers about a user: status and, where it is data, the data."""
    base = users(user)
    out: dict[str, Any] = {
        "list": (r := call(stack, "GET", f"{base}/memories", tenant=tenant)).status_code,
        "list_body": r.json()["memories"],
        "recall": recalled(stack, user, "anything at all about the user", tenant=tenant),
        "working": call(stack, "GET", "/v1/sessions/s1/working", tenant=tenant, params={"user_id": user}).status_code,
        "export": call(stack, "GET", f"{base}/export", tenant=tenant).status_code,
        "forget": call(stack, "DELETE", base, tenant=tenant).status_code,
        "delete_session": call(stack, "DELETE", f"{base}/sessions/s1/memories", tenant=tenant).status_code,
        "delete_topic": call(stack, "DELETE", f"{base}/memories", tenant=tenant, params={"topic": "tea"}).status_code,
    }
    return out


async def test_export_import_round_trips_and_forgetting_leaves_an_unknown_user(cmd_stack: Stack) -> None:
    stack, user, copy = cmd_stack, new_user(), new_user()
    await produce(stack.bootstrap, [turn(TENANT, user, "s1", 0, "I live in Pune and I love green tea.")])
    settled(stack, user, 2)
    fact = next(m for m in listed(stack, user) if m["type"] == "fact")
    applied(call(stack, "PATCH", f"{users(user)}/memories/{fact['id']}", params=WAIT, json={"text": "Lives in Mumbai"}))
    exported = call(stack, "GET", f"{users(user)}/export", params={"vectors": "true"}).json()
    assert {m["status"] for m in exported["memories"]} == {"active", "superseded"}
    assert exported["turns"]
    assert exported["sessions"]

    # Into another tenant and user: applied, readable, and exported back as the same document.
    imported = applied(
        call(stack, "POST", f"{users(copy)}/import", tenant="cmd-other", params=WAIT, json={"document": exported})
    )
    assert imported["kind"] == "import"
    assert len(imported["changes"]) == len(exported["memories"])
    again = call(stack, "GET", f"{users(copy)}/export", tenant="cmd-other", params={"vectors": "true"}).json()
    assert (again["tenant_id"], again["user_id"]) == ("cmd-other", copy)
    assert normalized(again) == normalized(exported)
    assert "Lives in Mumbai" in recalled(stack, copy, "where does the user live?", tenant="cmd-other")
    assert (
        call(stack, "POST", f"{users(copy)}/import", tenant="cmd-other", json={"document": exported}).status_code == 409
    )

    # Forget the original: nothing names them in any table, the index has no point (the wait checks it), and
    # every route answers as it does for a user never seen.
    assert rows_naming(stack_settings(stack).pg_dsn, TENANT, user)
    forgotten = applied(call(stack, "DELETE", users(user), params=WAIT))
    assert forgotten["kind"] == "forget"
    assert rows_naming(stack_settings(stack).pg_dsn, TENANT, user) == {}
    assert unknown_user_answers(stack, user) == unknown_user_answers(stack, new_user())
    assert call(stack, "GET", f"{users(user)}/memories/{fact['id']}/history").status_code == 404
    (event,) = await changes_caused_by(stack, forgotten["command_id"])
    assert event["op"] == "forgotten"
    assert "record" not in event
    # The copy is untouched.
    assert normalized(
        call(stack, "GET", f"{users(copy)}/export", tenant="cmd-other", params={"vectors": "true"}).json()
    ) == (normalized(exported))


def cli(stack: Stack, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return run_cli(stack.env, *args, stdin=stdin, timeout=120)


def test_the_cli_lists_adds_corrects_deletes_exports_imports_and_forgets(cmd_stack: Stack, tmp_path: Path) -> None:
    stack, user, copy = cmd_stack, new_user(), new_user()
    scope = ["--tenant", TENANT, "--user", user]
    for command in (
        ["memories", "--help"],
        ["forget-user", "--help"],
        *(["memories", c, "--help"] for c in ("list", "add", "correct", "delete", "export", "import")),
    ):
        assert cli(stack, *command).returncode == 0

    added = cli(
        stack,
        "memories",
        "add",
        *scope,
        "--type",
        "fact",
        "--text",
        "Lives in Oslo",
        "--category",
        "location",
        "--key",
        "city",
        "--value",
        "Oslo",
        "--wait",
    )
    assert added.returncode == 0, added.stderr
    memory_id = orjson.loads(added.stdout)["memory_id"]
    assert memory_id in cli(stack, "memories", "list", *scope).stdout
    fixed = cli(
        stack, "memories", "correct", *scope, memory_id, "--text", "Lives in Bergen", "--value", "Bergen", "--wait"
    )
    assert orjson.loads(fixed.stdout)["status"] == "applied"
    listing = cli(stack, "memories", "list", *scope).stdout
    assert "Lives in Bergen [location/city=Bergen]" in listing
    assert "Oslo" not in listing
    assert "Oslo" in cli(stack, "memories", "list", *scope, "--status", "any").stdout

    out = tmp_path / "export.json"
    assert cli(stack, "memories", "export", *scope, "-o", str(out)).returncode == 0
    loaded = cli(stack, "memories", "import", "--tenant", TENANT, "--user", copy, str(out), "--wait")
    assert orjson.loads(loaded.stdout)["status"] == "applied", loaded.stderr
    assert "Lives in Bergen" in cli(stack, "memories", "list", "--tenant", TENANT, "--user", copy).stdout

    new_id = orjson.loads(fixed.stdout)["memory_id"]
    assert orjson.loads(cli(stack, "memories", "delete", *scope, new_id, "--wait").stdout)["status"] == "applied"
    assert cli(stack, "memories", "list", *scope).stdout == ""
    missing = cli(stack, "memories", "delete", *scope, "--topic", "skydiving")
    assert missing.returncode == 1
    assert "404" in missing.stderr
    assert cli(stack, "memories", "delete", *scope).returncode == 2  # nothing named

    refused = cli(stack, "forget-user", *scope)
    assert refused.returncode == 2
    assert "--yes" in refused.stderr
    assert orjson.loads(cli(stack, "forget-user", *scope, "--yes", "--wait").stdout)["status"] == "applied"
    assert cli(stack, "memories", "export", *scope).returncode == 1


# --- isolation, as a property ------------------------------------------------------------------------------

# Two owners per example, drawn so that they often share a tenant or a user id (never both).
OWNERS = st.tuples(st.sampled_from(["iso-a", "iso-b"]), st.sampled_from(["u1", "u2"]))
PAIRS = st.tuples(OWNERS, OWNERS).filter(lambda pair: pair[0] != pair[1])
STEP = st.tuples(
    st.integers(min_value=0, max_value=1),  # whose command
    st.sampled_from(["add", "add", "correct", "delete", "delete_topic", "forget"]),
)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pair=PAIRS, steps=st.lists(STEP, min_size=2, max_size=7))
def test_no_answer_for_one_user_ever_holds_anothers_data(
    cmd_stack: Stack, pair: tuple[tuple[str, str], tuple[str, str]], steps: list[tuple[int, str]]
) -> None:
    stack, run = cmd_stack, uuid.uuid4().hex[:6]
    owners = [(tenant, f"{user}-{run}") for tenant, user in pair]
    markers = [f"zq{run}owner{n}" for n in range(2)]
    ids: list[list[str]] = [[], []]
    for n, (who, kind) in enumerate(steps):
        tenant, user = owners[who]
        text = f"{markers[who]} remembers item {n} about gardening"
        held = ids[who]
        if kind == "add" or (kind in ("correct", "delete") and not held):
            answer = applied(
                call(
                    stack,
                    "POST",
                    f"{users(user)}/memories",
                    tenant=tenant,
                    params=WAIT,
                    json={"type": "episode", "text": text},
                )
            )
            held.append(answer["memory_id"])
        elif kind == "correct":
            answer = applied(
                call(
                    stack,
                    "PATCH",
                    f"{users(user)}/memories/{held[-1]}",
                    tenant=tenant,
                    params=WAIT,
                    json={"text": f"{text} (corrected)"},
                )
            )
            held[-1] = answer["memory_id"]
        elif kind == "delete":
            applied(call(stack, "DELETE", f"{users(user)}/memories/{held.pop()}", tenant=tenant, params=WAIT))
        else:
            path = f"{users(user)}/memories" if kind == "delete_topic" else users(user)
            params = {**WAIT, "topic": "gardening"} if kind == "delete_topic" else WAIT
            status = call(stack, "DELETE", path, tenant=tenant, params=params).status_code
            assert status in (200, 404)  # 404: nothing to delete, as for an unknown user
            held.clear()
        for me in (0, 1):
            other = 1 - me
            tenant, user = owners[me]
            answers = [
                call(stack, "GET", f"{users(user)}/memories", tenant=tenant).text,
                call(stack, "GET", f"{users(user)}/export", tenant=tenant, params={"vectors": "true"}).text,
                stack.post(
                    "/v1/recall",
                    {"tenant_id": tenant, "user_id": user, "query": "gardening items", "record_access": False},
                ).text,
            ]
            for answer in answers:
                assert markers[other] not in answer
                assert not any(i in answer for i in ids[other])
            # Asking for the other's memory by id, under one's own scope, finds nothing of it.
            for i in ids[other]:
                history = call(stack, "GET", f"{users(user)}/memories/{i}/history", tenant=tenant)
                assert history.status_code == 404
                assert markers[other] not in history.text
