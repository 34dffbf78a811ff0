"""The archive record and key wrapping: round trips, and every way a record must refuse to open."""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from pathlib import Path

import orjson
import pytest

from schemas import SessionEvent, TurnEvent
from services.archive.codec import (
    ArchiveRecord,
    DataKey,
    MasterKey,
    RecordRejected,
    new_data_key,
    open_record,
    read_record,
    seal,
    unwrap,
    wrap,
)
from services.archive.master import load_master_key, master_key_path
from services.core.config import Settings
from services.core.errors import ConfigError

SECRET = "Ich wohne in der Zanzibarstraße 7 und mag grünen Tee."


def a_turn(user: str = "alice", **changes: object) -> TurnEvent:
    fields: dict[str, object] = {
        "event_id": "e-1",
        "tenant_id": "acme",
        "user_id": user,
        "session_id": "s-1",
        "turn_index": 3,
        "role": "user",
        "content": SECRET,
        "ts": datetime(2026, 5, 1, 12, 30, tzinfo=UTC),
        "metadata": {"channel": "web", "tags": ["a", "b"]},
    }
    return TurnEvent.model_validate({**fields, **changes})


def an_end(user: str = "alice") -> SessionEvent:
    return SessionEvent(
        event_id="end-1", tenant_id="acme", user_id=user, session_id="s-1", ts=datetime(2026, 5, 1, tzinfo=UTC)
    )


def edited(raw: bytes, **changes: object) -> ArchiveRecord:
    return ArchiveRecord.model_validate({**orjson.loads(raw), **changes})


def test_a_turn_and_a_session_end_round_trip_and_nothing_private_is_in_clear() -> None:
    key = new_data_key("acme", "alice")
    for event in (a_turn(), an_end()):
        raw = seal(key, event)
        record = read_record(raw)
        assert open_record(record, key) == event
        assert (record.tenant_id, record.user_id, record.event_id, record.session_id, record.type) == (
            "acme",
            "alice",
            event.event_id,
            "s-1",
            event.type,
        )
        assert record.key_id == key.key_id
    raw = seal(key, a_turn())
    for private in ("Zanzibar", "web", "channel", '"role"', "turn_index", "Tee"):
        assert private.encode() not in raw
    assert set(orjson.loads(raw)) == {
        "v",
        "tenant_id",
        "user_id",
        "event_id",
        "session_id",
        "ts",
        "type",
        "key_id",
        "nonce",
        "ciphertext",
    }


def test_sealing_twice_gives_different_ciphertexts_that_open_alike() -> None:
    key = new_data_key("acme", "alice")
    first, second = seal(key, a_turn()), seal(key, a_turn())
    assert first != second  # a fresh nonce each time
    assert open_record(read_record(first), key) == open_record(read_record(second), key)


def flip(text: str) -> str:
    data = bytearray(base64.b64decode(text))
    data[len(data) // 2] ^= 0x01
    return base64.b64encode(bytes(data)).decode()


@pytest.mark.parametrize(
    "changes",
    [
        {"ciphertext": "flip"},
        {"nonce": "flip"},
        {"event_id": "e-2"},  # the AAD binds every clear field
        {"session_id": "s-2"},
        {"ts": "2027-01-01T00:00:00Z"},
        {"type": "session_end"},
    ],
)
def test_a_tampered_record_is_rejected(changes: dict[str, str]) -> None:
    key = new_data_key("acme", "alice")
    raw = seal(key, a_turn())
    fields = orjson.loads(raw)
    record = edited(raw, **{k: flip(fields[k]) if v == "flip" else v for k, v in changes.items()})
    with pytest.raises(RecordRejected):
        open_record(record, key)


def test_moving_a_record_to_another_user_fails_even_with_that_users_key() -> None:
    alice, bob = new_data_key("acme", "alice"), new_data_key("acme", "bob")
    raw = seal(alice, a_turn())
    with pytest.raises(RecordRejected):
        open_record(read_record(raw), bob)  # bob's key on alice's record
    # The envelope rewritten to claim bob and bob's key id: the AAD no longer matches what was sealed.
    moved = edited(raw, user_id="bob", key_id=bob.key_id)
    with pytest.raises(RecordRejected):
        open_record(moved, bob)
    # A key object claiming to be alice's with bob's bytes does not open it either.
    with pytest.raises(RecordRejected):
        open_record(read_record(raw), DataKey("acme", "alice", alice.key_id, bob.secret))


def test_a_forgotten_users_new_key_does_not_open_their_old_records() -> None:
    old, new = new_data_key("acme", "alice"), new_data_key("acme", "alice")
    with pytest.raises(RecordRejected):
        open_record(read_record(seal(old, a_turn())), new)


def test_a_key_seals_only_its_own_users_events() -> None:
    with pytest.raises(ValueError, match="cannot seal"):
        seal(new_data_key("acme", "bob"), a_turn())


@pytest.mark.parametrize("raw", [None, b"", b"{broken", b"[]", b'{"v": 2}', orjson.dumps({"v": 1, "tenant_id": "t"})])
def test_what_is_not_a_record_is_rejected_before_any_key_is_needed(raw: bytes | None) -> None:
    with pytest.raises(RecordRejected):
        read_record(raw)


def test_wrapped_keys_unwrap_only_for_their_owner_and_master() -> None:
    master, other = MasterKey.from_base64(MasterKey.generate_base64()), MasterKey(b"\x07" * 32)
    key = new_data_key("acme", "alice")
    wrapped = wrap(master, key)
    assert key.secret not in wrapped
    assert unwrap(master, "acme", "alice", key.key_id, wrapped) == key
    for tenant, user, key_id, by in (
        ("acme", "bob", key.key_id, master),
        ("other", "alice", key.key_id, master),
        ("acme", "alice", "another-id", master),
        ("acme", "alice", key.key_id, other),
    ):
        with pytest.raises(RecordRejected):
            unwrap(by, tenant, user, key_id, wrapped)
    assert master.key_id != other.key_id
    assert len(master.key_id) == 16
    assert "secret" not in repr(key)
    assert "secret" not in repr(master)


def test_the_master_key_comes_from_settings_or_the_data_dir_and_only_the_writer_creates_one(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path)
    with pytest.raises(ConfigError, match="no archive master key"):
        load_master_key(settings)  # a reader never invents one
    created = load_master_key(settings, create=True)
    path = master_key_path(settings)
    assert path.stat().st_mode & 0o777 == 0o600
    assert load_master_key(settings) == created == load_master_key(settings, create=True)
    given = MasterKey.generate_base64()
    assert load_master_key(Settings(data_dir=tmp_path, master_key=given)) == MasterKey.from_base64(given)
    for bad in ("not base64!", base64.b64encode(b"short").decode()):
        with pytest.raises(ConfigError, match="MEMSTREAM_MASTER_KEY"):
            load_master_key(Settings(data_dir=tmp_path, master_key=bad))
