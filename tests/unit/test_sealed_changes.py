"""memory.changes sealed per user (services/archive/changes.py): round trips, every way an envelope must refuse to
open, batch opening with the keys at hand, and the archive's v1 record untouched by the shared sealing."""

from __future__ import annotations

import base64
import os
from datetime import UTC, datetime
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from schemas import ChangeOp, MemoryChange, MemoryRecord, MemoryStatus, MemoryType, Provenance, TurnEvent
from schemas.changes import SealedChange
from schemas.commands import UserForgotten
from services.archive.changes import (
    FORGOTTEN,
    UNREADABLE,
    open_change,
    open_with,
    read_change,
    seal_change,
)
from services.archive.codec import DataKey, RecordRejected, new_data_key, open_record, read_record, seal, seal_plain

NOW = datetime(2026, 5, 1, 12, 30, tzinfo=UTC)
MEMORY_ID = "0b5e4c2a-7d1f-5e3a-9c8b-1a2b3c4d5e6f"
SECRET = "Lives in Zanzibarstraße 7"


def a_change(user: str = "alice", **changes: Any) -> MemoryChange:
    record = MemoryRecord(
        id=MEMORY_ID,
        tenant_id="acme",
        user_id=user,
        type=MemoryType.FACT,
        text=SECRET,
        content_hash="h",
        category="location",
        key_name="street",
        value="Zanzibarstraße 7",
        importance=0.7,
        confidence=0.9,
        status=MemoryStatus.ACTIVE,
        observed_at=NOW,
        created_at=NOW,
        updated_at=NOW,
        source=Provenance(session_id="s-1", event_ids=["e-1"], metadata=[{"channel": "web"}]),
        entities=["Zanzibarstraße"],
        version=3,
    )
    fields: dict[str, Any] = {
        "tenant_id": "acme",
        "user_id": user,
        "op": ChangeOp.UPDATED,
        "record": record,
        "vector": [0.25, 0.5],
        "cause": ["cmd-1", "e-1"],
        "committed_at": NOW,
        "turn_ts": NOW,
        "reason": "corrected by topic 'Zanzibar'",
    }
    return MemoryChange.model_validate({**fields, **changes})


def edited(raw: bytes, **changes: object) -> SealedChange:
    return SealedChange.model_validate({**orjson.loads(raw), **changes})


def test_a_change_round_trips_and_only_routing_fields_are_in_clear() -> None:
    key = new_data_key("acme", "alice")
    change = a_change()
    raw = seal_change(key, change)
    envelope = read_change(raw)
    assert isinstance(envelope, SealedChange)
    assert open_change(envelope, key) == change
    clear = orjson.loads(raw)
    assert {k: v for k, v in clear.items() if k not in ("nonce", "ciphertext")} == {
        "schema_version": 2,
        "tenant_id": "acme",
        "user_id": "alice",
        "op": "updated",
        "memory_id": MEMORY_ID,
        "version": 3,
        "type": "fact",
        "status": "active",
        "committed_at": "2026-05-01T12:30:00Z",
        "cause": ["cmd-1", "e-1"],
        "key_id": key.key_id,
    }
    for private in ("Zanzibar", "street", "location", "channel", "0.25", "reason", "record", "vector"):
        assert private.encode() not in raw
    assert envelope.key == b"acme:alice"  # the Kafka key, as every topic has it


def test_sealing_twice_gives_different_ciphertexts_that_open_alike() -> None:
    key = new_data_key("acme", "alice")
    first, second = seal_change(key, a_change()), seal_change(key, a_change())
    assert first != second
    assert open_change(edited(first), key) == open_change(edited(second), key)


def flip(text: str) -> str:
    data = bytearray(base64.b64decode(text))
    data[len(data) // 2] ^= 0x01
    return base64.b64encode(bytes(data)).decode()


@pytest.mark.parametrize(
    "changes",
    [
        {"ciphertext": "flip"},
        {"nonce": "flip"},
        # The AAD binds every clear field: each edited alone, to a value that is valid on its own.
        {"op": "deleted"},
        {"memory_id": "1b5e4c2a-7d1f-5e3a-9c8b-1a2b3c4d5e6f"},
        {"version": 4},
        {"type": "preference"},
        {"status": "deleted"},
        {"committed_at": "2026-05-01T12:31:00Z"},
        {"cause": ["cmd-2"]},
        {"cause": []},
        {"tenant_id": "other"},
        {"user_id": "bob"},
        {"key_id": "another-key"},
    ],
)
def test_a_tampered_envelope_is_rejected(changes: dict[str, Any]) -> None:
    key = new_data_key("acme", "alice")
    raw = seal_change(key, a_change())
    fields = orjson.loads(raw)
    envelope = edited(raw, **{k: flip(fields[k]) if v == "flip" else v for k, v in changes.items()})
    with pytest.raises(RecordRejected):
        open_change(envelope, key)
    # Nor with a key that claims to be whatever the edited envelope names, with the right bytes.
    with pytest.raises(RecordRejected):
        open_change(envelope, DataKey(envelope.tenant_id, envelope.user_id, envelope.key_id, key.secret))


def test_another_users_key_or_the_users_next_key_does_not_open_it() -> None:
    alice, bob = new_data_key("acme", "alice"), new_data_key("acme", "alice")
    raw = seal_change(alice, a_change())
    with pytest.raises(RecordRejected):
        open_change(edited(raw), new_data_key("acme", "bob"))
    with pytest.raises(RecordRejected):
        open_change(edited(raw), bob)  # forgotten, came back, new key: the old changes stay shut
    moved = edited(raw, user_id="bob", key_id=bob.key_id)
    with pytest.raises(RecordRejected):
        open_change(moved, DataKey("acme", "bob", bob.key_id, bob.secret))


def test_a_sealed_change_that_disagrees_with_its_envelope_is_rejected() -> None:
    """Sealed by someone with the key, but the clear fields describe another change: opening checks them."""
    key = new_data_key("acme", "alice")
    envelope = read_change(seal_change(key, a_change()))
    assert isinstance(envelope, SealedChange)
    other = orjson.dumps(a_change(op=ChangeOp.DELETED).model_dump(mode="json"))
    forged = envelope.model_copy(update=seal_plain(key, envelope, other))
    with pytest.raises(RecordRejected, match="does not match"):
        open_change(forged, key)
    not_a_change = envelope.model_copy(update=seal_plain(key, envelope, b'{"op": "added"}'))
    with pytest.raises(RecordRejected, match="not a change"):
        open_change(not_a_change, key)


def test_a_key_seals_only_its_own_users_changes() -> None:
    with pytest.raises(ValueError, match="cannot seal"):
        seal_change(new_data_key("acme", "bob"), a_change())


@pytest.mark.parametrize(
    "raw",
    [
        None,
        b"",
        b"{broken",
        b"[]",
        b"{}",
        orjson.dumps(a_change().model_dump(mode="json")),  # a change in clear (schema 1) is no longer a message
        orjson.dumps({"schema_version": 1, "op": "added", "tenant_id": "acme"}),
    ],
)
def test_what_is_not_a_message_is_rejected_before_any_key_is_needed(raw: bytes | None) -> None:
    with pytest.raises(RecordRejected):
        read_change(raw)


def test_a_forgotten_message_stays_in_clear() -> None:
    gone = UserForgotten(tenant_id="acme", user_id="alice", cause=["cmd-9"], committed_at=NOW, deleted_rows={"m": 2})
    assert read_change(orjson.dumps(gone.model_dump(mode="json"))) == gone


def test_a_batch_opens_in_order_and_counts_what_it_skips() -> None:
    alice, bob, bob_before = new_data_key("acme", "alice"), new_data_key("acme", "bob"), new_data_key("acme", "bob")
    gone = UserForgotten(tenant_id="acme", user_id="carol", cause=["c"], committed_at=NOW)
    tampered = edited(seal_change(alice, a_change()), version=9)
    batch = [
        read_change(seal_change(new_data_key("acme", "carol"), a_change("carol"))),  # carol's key is gone
        read_change(seal_change(alice, a_change())),
        gone,
        read_change(seal_change(bob_before, a_change("bob"))),  # bob came back with a new key
        tampered,
        read_change(seal_change(bob, a_change("bob"))),
    ]
    opened, skipped = open_with({alice.owner: alice, bob.owner: bob}, batch)
    assert opened == [a_change(), gone, a_change("bob")]
    assert skipped == {FORGOTTEN: 2, UNREADABLE: 1}


texts = st.text(st.characters(exclude_categories=["Cs"]), min_size=1, max_size=200)


@given(
    text=texts,
    version=st.integers(min_value=1, max_value=2**31 - 1),
    op=st.sampled_from(list(ChangeOp)),
    status=st.sampled_from(list(MemoryStatus)),
    cause=st.lists(st.text(min_size=1, max_size=20), max_size=4),
    vector=st.none() | st.lists(st.floats(allow_nan=False, allow_infinity=False, width=32), max_size=8),
)
def test_any_change_round_trips_and_its_text_never_shows(
    text: str, version: int, op: ChangeOp, status: MemoryStatus, cause: list[str], vector: list[float] | None
) -> None:
    key = new_data_key("acme", "alice")
    base = a_change()
    said = f"qzxjv {text}"  # a word that cannot occur in clear by chance
    record = base.record.model_copy(update={"text": said, "version": version, "status": status})
    change = base.model_copy(update={"record": record, "op": op, "cause": cause, "vector": vector})
    raw = seal_change(key, change)
    envelope = read_change(raw)
    assert isinstance(envelope, SealedChange)
    assert open_change(envelope, key) == change
    assert (envelope.version, envelope.op, envelope.status, envelope.cause) == (version, op, status, cause)
    assert b"qzxjv" not in raw


# An archive record as the code before the shared sealing wrote it (fixed key and nonce): format v1 must stay
# what it is, byte for byte, and every record already on the log must still open.
GOLDEN_KEY = DataKey("acme", "alice", "k-golden", bytes(range(32)))
GOLDEN_NONCE = bytes(range(100, 112))
GOLDEN = (
    b'{"v":1,"tenant_id":"acme","user_id":"alice","event_id":"e-1","session_id":"s-1","ts":"2026-05-01T12:30:00Z",'
    b'"type":"turn","key_id":"k-golden","nonce":"ZGVmZ2hpamtsbW5v","ciphertext":"MzmtBRGMO/9hFDqaqQwFk2D4NyapCYUXy'
    b"aXzIZ+Bn2rxxHHiYDDvYZOSFkuiK67tIXn5hE0vYwTYhN+znd7M7iq2+W+6IlhgqUPPMHT5Qo8LFkBdw+e35KzcB+ZXMToirEuwTFt/jlODz"
    b"/P1k1mJ2hgYsCXxSeMWnlv+1K7VbKZG/rqSEhAhQ6gnOGDlomag4aKfZHxp8vNW4lx3uzPE2LwTRX7Noc3CHyHRks5Ogbrjg6OLG5EmugpvT"
    b"iGs5Hq26BU1xopnG20nXVFBMEmXemJktGHoNnjYnGwg7s6scoNuUM2TzOALV3SMOLTaddqwPqxuyZK2nr+1kdn0Rx7NuwId7qAQSPP22noVOJ"
    b'bDcDD87igEh0LIzYBpYFxpaRlPuVoe9euN"}'
)


def golden_turn() -> TurnEvent:
    return TurnEvent.model_validate(
        {
            "event_id": "e-1",
            "tenant_id": "acme",
            "user_id": "alice",
            "session_id": "s-1",
            "turn_index": 3,
            "role": "user",
            "content": "Ich wohne in der Zanzibarstraße 7 und mag grünen Tee.",
            "ts": NOW,
            "metadata": {"channel": "web", "tags": ["a", "b"]},
        }
    )


def test_archive_records_of_format_v1_are_unchanged_and_still_open(monkeypatch: pytest.MonkeyPatch) -> None:
    assert open_record(read_record(GOLDEN), GOLDEN_KEY) == golden_turn()
    monkeypatch.setattr(os, "urandom", lambda n: GOLDEN_NONCE[:n])  # the codec's nonces
    assert seal(GOLDEN_KEY, golden_turn()) == GOLDEN
