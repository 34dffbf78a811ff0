"""Operations routes on the live server, whose Kafka never answers: admins only, and what they answer without it.
The console page itself is served outside /v1, with no key and a strict content security policy."""

from __future__ import annotations

import uuid

from services.api.ops_routes import preview
from services.auth import Role
from tests.api.conftest import LiveApi, bearer


def test_operations_are_for_admins_only(api: LiveApi) -> None:
    _, reader = api.new_key(f"ops-{uuid.uuid4().hex[:6]}", Role.WRITE)
    for path in ("/v1/ops/lag", "/v1/ops/dlq"):
        refused = api.client.get(path, headers=bearer(reader))
        assert refused.status_code == 403, path
        assert api.client.get(path, headers={"authorization": ""}).status_code == 401


def test_a_dead_letter_preview_is_printable_text() -> None:
    shown = preview(b"<script>alert(1)</script>\x00\x1b[31m\xff")
    assert shown.isprintable()
    assert "\\x00" in shown
    assert "\\x1b" in shown
    assert "\\xff" in shown
    assert preview(None) == ""
    assert len(preview(b"a" * 10_000)) == 400


def test_the_console_is_served_without_a_key(api: LiveApi) -> None:
    page = api.client.get("/console/", headers={"authorization": ""})
    assert page.status_code == 200
    assert '<html lang="en">' in page.text
    assert "script-src 'self'" in page.headers["content-security-policy"]
    for asset in ("console.js", "console.css"):
        assert api.client.get(f"/console/{asset}", headers={"authorization": ""}).status_code == 200


def test_admin_operations_answer_without_a_broker_and_leave_no_consumer_behind(api: LiveApi) -> None:
    """A broker that never answers: lag is unknown or the request meets its deadline; either way a clear answer.

    Consumers started for an abandoned request are stopped (the suite turns an unclosed one into an error).
    """
    for path in ("/v1/ops/lag", "/v1/ops/dlq"):
        answer = api.client.get(path)
        assert answer.status_code in (200, 503), (path, answer.text)
        if answer.status_code == 200 and path.endswith("lag"):
            assert all(stage["lag"] is None for stage in answer.json()["stages"])
        if answer.status_code == 503:
            assert answer.json()["error"]["code"] == "unavailable"
