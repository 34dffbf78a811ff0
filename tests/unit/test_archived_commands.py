"""Commands in the archive, pure: the sealed command record, the forget marker in clear, and what a generation's
commands stage takes out of a batch of archive records."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import orjson
import pytest

from agents.consolidator.archived import archive_message, archived, replayed
from schemas import TurnEvent
from schemas.commands import (
    AccessCommand,
    AddMemory,
    AnyCommand,
    CorrectMemory,
    DeleteSession,
    DeleteTopic,
    ForgetUser,
    ImportPart,
)
from services.archive.codec import (
    ArchiveRecord,
    RecordRejected,
    forget_of,
    forgotten,
    new_data_key,
    open_command,
    open_record,
    read_record,
    seal,
    seal_command,
    sealable_bytes,
)
from services.core import topics
from services.core.errors import InvalidEvent

AT = datetime(2026, 5, 1, 12, 30, tzinfo=UTC)
SECRET = "Ich wohne in der Zanzibarstraße 7"


def ids(user: str = "alice") -> dict[str, object]:
    return {"command_id": str(uuid.uuid4()), "tenant_id": "acme", "user_id": user, "at": AT}


def add(user: str = "alice") -> AddMemory:
    return AddMemory.model_validate({**ids(user), "memory_id": str(uuid.uuid4()), "type": "fact", "text": SECRET})


def every_kind() -> list[AnyCommand]:
    memory = str(uuid.uuid4())
    return [
        add(),
        CorrectMemory.model_validate({**ids(), "memory_id": memory, "new_id": str(uuid.uuid4()), "text": SECRET}),
        DeleteSession.model_validate({**ids(), "session_id": "s-1"}),
        DeleteTopic.model_validate({**ids(), "topic": "Zanzibarstraße"}),
        ImportPart.model_validate(
            {**ids(), "import_id": memory, "part": 0, "parts": 1, "source_tenant_id": "a", "source_user_id": "b"}
        ),
    ]


def edited(raw: bytes, **changes: object) -> ArchiveRecord:
    return ArchiveRecord.model_validate({**orjson.loads(raw), **changes})


def test_every_command_but_a_forget_round_trips_sealed_with_nothing_private_in_clear() -> None:
    key = new_data_key("acme", "alice")
    for command in every_kind():
        raw = seal_command(key, command)
        record = read_record(raw)
        assert (record.type, record.event_id, record.session_id) == ("command", command.command_id, "")
        assert record.ts == "2026-05-01T12:30:00Z"
        assert open_command(record, key) == command
        assert b"Zanzibar" not in raw
        with pytest.raises(RecordRejected):
            open_record(record, key)  # a command is not a chat event, for the window or any event replay


def test_a_command_record_does_not_open_edited_moved_or_with_another_key() -> None:
    key, other = new_data_key("acme", "alice"), new_data_key("acme", "alice")
    raw = seal_command(key, add())
    for change in ({"event_id": str(uuid.uuid4())}, {"ts": "2026-05-02T00:00:00Z"}, {"type": "turn"}):
        with pytest.raises(RecordRejected):
            open_command(edited(raw, **change), key)
    with pytest.raises(RecordRejected):
        open_command(read_record(raw), other)
    with pytest.raises(ValueError, match="cannot seal"):
        seal_command(new_data_key("acme", "bob"), add())
    with pytest.raises(ValueError, match="in clear"):
        seal_command(key, ForgetUser.model_validate(ids()))
    with pytest.raises(RecordRejected):
        open_command(read_record(seal(key, turn())), key)


def turn(user: str = "alice") -> TurnEvent:
    return TurnEvent.model_validate(
        {
            "event_id": "e-1",
            "tenant_id": "acme",
            "user_id": user,
            "session_id": "s-1",
            "turn_index": 0,
            "role": "user",
            "content": SECRET,
            "ts": AT,
        }
    )


def test_a_forget_is_a_marker_in_clear_with_ids_and_time_only() -> None:
    forget = ForgetUser.model_validate(ids())
    record = read_record(forgotten(forget))
    assert (record.type, record.key_id, record.nonce, record.ciphertext) == ("forgotten", "", "", "")
    assert forget_of(record) == forget
    with pytest.raises(RecordRejected):
        forget_of(read_record(seal_command(new_data_key("acme", "alice"), add())))


def test_access_marks_are_not_archived_and_every_archived_command_is_an_archive_outbox_row() -> None:
    key = new_data_key("acme", "alice")
    assert not archived(AccessCommand.model_validate({**ids(), "memory_ids": [str(uuid.uuid4())]}))
    assert all(archived(c) for c in [*every_kind(), ForgetUser.model_validate(ids())])
    command = add()
    row = archive_message(command, key)
    assert (row.topic, row.key, row.scope) == (topics.ARCHIVE, b"acme:alice", "acme:alice")
    assert row.id == archive_message(command, key).id  # one row per command, however often it is queued
    assert open_command(read_record(row.value), key) == command
    assert read_record(archive_message(ForgetUser.model_validate(ids()), None).value).type == "forgotten"
    with pytest.raises(ValueError, match="needs its user's key"):
        archive_message(command, None)


def test_a_replayed_batch_keeps_commands_in_order_and_passes_over_events_the_forgotten_and_the_returned() -> None:
    alice, bob, carol = (new_data_key("acme", u) for u in ("alice", "bob", "carol"))
    first, second = add(), add()
    bobs, bob_forgot = add("bob"), ForgetUser.model_validate(ids("bob"))
    carol_forgot = ForgetUser.model_validate(ids("carol"))
    records = [
        read_record(v)
        for v in (
            seal_command(alice, first),
            seal(alice, turn()),
            seal_command(bob, bobs),  # bob was forgotten: his key is gone
            forgotten(bob_forgot),  # ... and has not come back: the forget replays
            forgotten(carol_forgot),  # carol came back (a key again): her old forget does not
            seal_command(alice, second),
        )
    ]
    current = {("acme", "alice"): alice, ("acme", "carol"): carol}
    out = replayed(records, current)
    assert out.commands == [first, bob_forgot, second]
    assert dict(out.skipped) == {"events": 1, "forgotten": 1, "returned": 1}
    # A key of the user's but not the one it was sealed with: sealed before a forget, so forgotten too.
    assert replayed(records[:1], {("acme", "alice"): new_data_key("acme", "alice")}).skipped["forgotten"] == 1


def test_a_command_record_that_does_not_open_with_its_users_key_is_bad_input() -> None:
    alice = new_data_key("acme", "alice")
    tampered = edited(seal_command(alice, add()), ts="2026-06-01T00:00:00Z")
    with pytest.raises(InvalidEvent) as raised:
        replayed([tampered], {("acme", "alice"): alice})
    assert raised.value.reason == "archive_unreadable"


def test_a_command_cut_to_the_sealable_size_fits_in_a_message_once_sealed() -> None:
    key, limit = new_data_key("acme", "alice"), 64 * 1024
    envelope = {**ids(), "import_id": str(uuid.uuid4()), "part": 0, "parts": 1}

    def part(n: int) -> ImportPart:
        vectors = {str(uuid.uuid4()): [0.123456789] * 10 for _ in range(n)}
        return ImportPart.model_validate(
            {**envelope, "source_tenant_id": "a", "source_user_id": "b", "vectors": vectors}
        )

    n = 1
    while len(part(n + 1).model_dump_json()) <= sealable_bytes(limit):
        n += 1
    largest = part(n)
    assert len(largest.model_dump_json()) > sealable_bytes(limit) - 500  # as large as the budget allows
    assert len(seal_command(key, largest)) <= limit
