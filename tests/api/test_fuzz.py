"""Random JSON bodies and random ids never get a 5xx."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote, urlencode

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.api.conftest import LiveApi

# Text with the usual suspects mixed in: NUL, lone surrogates, ':' and whitespace, RTL marks.
nasty = st.sampled_from(["\x00", "\ud800", "\udfff", ":", " ", "\u2028", "\u202e", "\ufeff", "é", "😀", "%00", "'"])
texts = st.lists(st.text(max_size=20) | nasty, max_size=4).map("".join)
numbers = (
    st.integers() | st.floats(allow_nan=True, allow_infinity=True) | st.sampled_from([2**63, 2**64, -(2**63), 10**30])
)
scalars = st.none() | st.booleans() | numbers | texts
values = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(texts, inner, max_size=4), max_leaves=12
)

recall_bodies = st.fixed_dictionaries(
    {"tenant_id": texts | values, "user_id": texts | values, "query": texts | values},
    optional={
        "top_k": numbers | values,
        "token_budget": numbers | values,
        "session_id": texts | values,
        "types": st.lists(st.sampled_from(["fact", "preference", "episode", "exchange"]) | texts, max_size=5) | values,
        "as_of": values,
    },
)


def _encode(value: Any) -> bytes:
    # json.dumps writes NaN/Infinity tokens and \\udXXX escapes: exactly what the API must refuse.
    return json.dumps(value, allow_nan=True).encode()


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(body=recall_bodies | values)
def test_random_recall_bodies_never_5xx(api: LiveApi, body: Any) -> None:
    response = api.client.post("/v1/recall", content=_encode(body), headers={"content-type": "application/json"})
    assert response.status_code < 500, response.text
    if response.status_code >= 400:
        assert response.json()["error"]["message"]


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(user=texts, tenant=texts, offset=st.integers() | texts, kind=texts)
def test_random_list_parameters_never_5xx(api: LiveApi, user: str, tenant: str, offset: Any, kind: str) -> None:
    path_user = quote(user.encode("utf-8", "surrogatepass"), safe="")
    query = urlencode({"tenant_id": tenant, "offset": offset, "type": kind}, encoding="utf-8", errors="surrogatepass")
    response = api.client.get(f"/v1/users/{path_user}/memories?{query}")
    assert response.status_code < 500, response.text
    assert response.headers["content-type"].startswith("application/json")
