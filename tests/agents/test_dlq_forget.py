"""Forgetting reaches memory.dlq: a dead-lettered event of a known user is sealed with their data key.

The window stage (through Faust's test context, over a real Postgres)
dead-letters a parseable bad turn of user A and unparseable bytes keyed with
A's key; other bytes name nobody; A is
forgotten; then everything the DLQ holds is read from its beginning, as a
fresh consumer would: none of A's words are there in clear, the operator's
reader says `forgotten` for A's entry, and the unidentifiable bytes stay in
clear (they expire with the topic's 30 days).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import orjson
import pytest

from agents import dlq as dead_letters
from services.archive import dlq as sealed
from services.archive.codec import DataKey, RecordRejected
from services.cli.dlq import entry_line
from services.kafka.dead_letters import redacted
from services.stores.postgres.forget import forget_user
from tests.agents.test_agents import Harness
from tests.agents.test_agents import harness as harness  # the fixture
from tests.stack import turn

WORDS = b"tangerine-octopus"


def test_whose_bytes_a_dead_letter_holds() -> None:
    assert sealed.named_owner(b'{"tenant_id": "t", "user_id": "u", "x": 1}') == ("t", "u")
    for nobody in (b"{broken", b"[1]", b'{"tenant_id": "t"}', b'{"tenant_id": 1, "user_id": "u"}', b"", None):
        assert sealed.named_owner(nobody) is None
    assert sealed.keyed_owner(b"t:u") == ("t", "u")
    for nokey in (b"tu", b":u", b"t:", b"t:u:v", None):
        assert sealed.keyed_owner(nokey) is None


def test_a_sealed_entry_opens_with_its_users_key_only() -> None:
    key, other = DataKey("t", "u", "k1", b"\x01" * 32), DataKey("t", "u", "k2", b"\x02" * 32)
    value = sealed.seal(key, b'{"content": "' + WORDS + b'"}')
    assert WORDS not in value
    headers = {sealed.SEALED_HEADER: b"1"}
    assert sealed.open_with({("t", "u"): key}, value, headers).value == b'{"content": "' + WORDS + b'"}'
    assert sealed.open_with({("t", "u"): other}, value, headers).state == sealed.FORGOTTEN  # a newer key
    assert sealed.open_with({}, value, headers).state == sealed.FORGOTTEN
    moved = orjson.loads(value) | {"user_id": "v"}
    assert sealed.open_with(
        {("t", "v"): DataKey("t", "v", "k1", b"\x01" * 32)}, orjson.dumps(moved), headers
    ).state == (sealed.UNREADABLE)
    assert sealed.open_with({}, b"plain", {}).state == sealed.CLEAR
    with pytest.raises(RecordRejected):
        sealed.read_sealed(b"{}", headers)


async def test_a_forgotten_users_dead_letters_cannot_be_read_in_clear(
    harness: Callable[[Any, str], Harness],
) -> None:
    from agents.window import agent

    h = harness(agent, "turns")  # the stage seals its dead letters with its Runtime's keys
    bad = turn("t", "u", "s", 0, f"my passphrase is {WORDS.decode()}") | {"role": "wizard"}
    broken = b"u's " + WORDS + b" {broken"  # not JSON, but keyed t:u, a user with a key
    await h.feed([orjson.dumps(bad), broken], lambda: len(h.sink("dlq").sent) == 2)
    nobody = b"nobody's " + WORDS  # no key, no ids: stays in clear
    await dead_letters.DeadLetters(h.sink("dlq"), 1 << 20, h.runtime.keys).send_value(
        None, nobody, stage="test", reason="invalid_json", error="-"
    )

    entries = h.sink("dlq").sent
    (key, value, headers), (_, keyed, keyed_headers), (_, clear, clear_headers) = entries
    assert clear == nobody
    assert headers is not None
    assert keyed_headers is not None
    assert clear_headers is not None
    assert (headers[sealed.TENANT_HEADER], headers[sealed.USER_HEADER]) == (b"t", b"u")
    assert (headers["x-memstream-reason"], headers["x-memstream-stage"]) == (b"schema_violation", b"window")
    assert keyed_headers[sealed.USER_HEADER] == b"u"
    assert WORDS not in value
    assert WORDS not in keyed
    assert sealed.USER_HEADER not in clear_headers
    # Before the forget the operator's reader opens them, byte for byte.
    opened = await sealed.open_entries(h.runtime.keys, [(v, hs or {}) for _, v, hs in entries])
    assert [(e.state, e.value) for e in opened] == [
        (sealed.OPENED, orjson.dumps(bad)),
        (sealed.OPENED, broken),
        (sealed.CLEAR, nobody),
    ]

    async with h.runtime.pg.transaction("forget") as conn:
        await forget_user(conn, "t", "u")

    # A fresh reader of the whole topic: A's words nowhere in clear, A's entry says forgotten.
    everything = [(k, v, hs or {}) for k, v, hs in entries]
    for_a = [e for e in everything if e[2].get(sealed.USER_HEADER) == b"u"]
    assert for_a
    assert not any(WORDS in v or any(WORDS in x for x in hs.values()) for _, v, hs in for_a)
    after = await sealed.open_entries(h.runtime.keys, [(v, hs) for _, v, hs in everything])
    assert [e.state for e in after] == [sealed.FORGOTTEN, sealed.FORGOTTEN, sealed.CLEAR]
    line = entry_line(0, 0, key, headers, after[0])
    assert line["state"] == "forgotten"
    assert "value" not in line
    assert WORDS not in orjson.dumps(line)


def test_the_clear_error_of_a_sealed_entry_quotes_none_of_the_input() -> None:
    words = "my passphrase is tangerine"
    pydantic_style = (
        f"1 validation error for TurnEvent\ncontent\n  Too long [type=too_long, input_value='{words}', input_type=str]"
    )
    nested = f"Input should be 'user' [type=enum, input_value={{'content': \"{words}\"}}, input_type=dict]"
    for error in (pydantic_style, nested, f"ValueError({words!r})"):
        assert "tangerine" not in redacted(error)
    assert "type=too_long" in redacted(pydantic_style)  # what went wrong stays readable


def test_hostile_ids_never_reach_the_key_store() -> None:
    """A value or key naming a NUL, a separator, a space or a lone surrogate names nobody: it stays in clear."""
    for tenant, user in (("a\u0000b", "u"), ("t", "u/x"), ("t", "\ud800"), ("", "u"), ("t", " u")):
        assert sealed.named_owner(json.dumps({"tenant_id": tenant, "user_id": user}).encode()) is None
        assert sealed.keyed_owner(f"{tenant}:{user}".encode("utf-8", "surrogatepass")) is None
    assert sealed.named_owner(b'{"tenant_id": "t", "user_id": "u"}') == ("t", "u")
