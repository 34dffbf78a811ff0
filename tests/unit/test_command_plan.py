"""Memory commands, pure: what each command does to a record, which memories a topic takes, how an import maps
ids and splits into messages, and the command and change contracts."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import orjson
import pytest
from pydantic import ValidationError

from agents.consolidator import command_plan as plan
from schemas import ChangeOp, MemoryChange, MemoryRecord, MemoryStatus, MemoryType, Provenance, codec
from schemas.commands import (
    MANUAL_SESSION,
    AccessCommand,
    AddMemory,
    ChangeMessage,
    CommandMessage,
    CorrectMemory,
    DeleteTopic,
    ForgetUser,
    ImportPart,
    UserForgotten,
    command_adapter,
)
from schemas.export import ExportDocument, ExportedSession, ExportedTurn
from services.archive.codec import new_data_key
from services.core.command_rules import matches_topic
from services.core.import_parts import ItemTooLarge, import_parts
from services.core.textutil import content_hash, stable_id

NOW = datetime(2026, 5, 1, tzinfo=UTC)
LATER = NOW + timedelta(hours=1)
CMD = stable_id("cmd", "1")


def record(
    text: str,
    *,
    n: str = "m",
    type_: MemoryType = MemoryType.PREFERENCE,
    status: MemoryStatus = MemoryStatus.ACTIVE,
    user: str = "u",
    **fields: object,
) -> MemoryRecord:
    return MemoryRecord.model_validate(
        {
            "id": stable_id("mem", user, n),
            "tenant_id": "t",
            "user_id": user,
            "type": type_,
            "text": text,
            "content_hash": content_hash(text),
            "importance": 0.5,
            "confidence": 0.9,
            "status": status,
            "observed_at": NOW,
            "created_at": NOW,
            "updated_at": NOW,
            "source": Provenance(session_id="s1", event_ids=["e1"], metadata=[{"channel": "web"}]),
            "access_count": 3,
            **fields,
        }
    )


def add(**fields: object) -> AddMemory:
    body = {"type": "preference", "text": "Prefers aisle seats", **fields}
    return AddMemory.model_validate(
        {"command_id": CMD, "tenant_id": "t", "user_id": "u", "at": NOW, "memory_id": stable_id("new"), **body}
    )


# --- add ------------------------------------------------------------------------------


def test_a_manual_memory_is_a_candidate_whose_source_is_the_command() -> None:
    cmd = add(text="Works with Ada Lovelace at Babbage Labs", entities=["Engines"], importance=0.9)
    item = plan.add_candidate(cmd, [0.1, 0.2], "model-x")
    c = item.candidate
    assert (c.candidate_id, c.type, c.text, c.importance, c.confidence) == (
        cmd.memory_id,
        MemoryType.PREFERENCE,
        cmd.text,
        0.9,
        1.0,
    )
    assert c.observed_at == NOW
    assert c.source.session_id == MANUAL_SESSION
    assert c.source.event_ids == [CMD]  # a redelivered command finds itself already seen
    assert c.source.metadata == [{"source": "manual", "command_id": CMD, "at": NOW.isoformat()}]
    assert c.entities == ["Engines", "Ada Lovelace", "Babbage Labs"]
    assert (item.vector, item.model, item.key) == ([0.1, 0.2], "model-x", b"t:u")


def test_a_manual_keyed_fact_names_its_category_for_its_key_and_its_key_for_its_value() -> None:
    fact = add(type="fact", text="Lives in Berlin", category="location", key_name="city", value="Berlin")
    assert (fact.category, fact.key_name, fact.value) == ("location", "city", "Berlin")
    with pytest.raises(ValidationError, match="key_name needs a category"):
        add(key_name="city")
    with pytest.raises(ValidationError, match="value needs a category and a key_name"):
        add(category="location", value="Berlin")
    for bad in ({"text": "   "}, {"text": "\x00\x01"}, {"text": "x" * 8001}, {"type": "opinion"}, {"importance": 2}):
        with pytest.raises(ValidationError):
            add(**bad)
    assert add(text="  two\x00 words  ").text == "two words"


# --- correct, delete --------------------------------------------------------------------


def test_a_correction_supersedes_the_old_version_and_keeps_what_the_memory_was() -> None:
    old = record("Lives in Berlin", type_=MemoryType.FACT, category="location", key_name="city", value="Berlin")
    old = old.model_copy(update={"version": 4, "last_accessed_at": NOW, "entities": ["Berlin"]})
    cmd = CorrectMemory(
        command_id=CMD,
        tenant_id="t",
        user_id="u",
        at=LATER,
        memory_id=old.id,
        new_id=stable_id("v2"),
        text="Lives in Munich",
        value="Munich",
    )
    before, after = plan.corrected(old, cmd, LATER + timedelta(seconds=1))
    assert (before.id, before.status, before.superseded_by, before.superseded_at, before.version) == (
        old.id,
        MemoryStatus.SUPERSEDED,
        cmd.new_id,
        LATER,
        5,
    )
    assert before.text == "Lives in Berlin"  # history keeps the old words
    assert (after.id, after.status, after.version, after.text, after.value) == (
        cmd.new_id,
        MemoryStatus.ACTIVE,
        1,
        "Lives in Munich",
        "Munich",
    )
    assert after.content_hash == content_hash("Lives in Munich")
    assert (after.type, after.category, after.key_name) == (MemoryType.FACT, "location", "city")
    assert (after.importance, after.access_count, after.last_accessed_at) == (0.5, 3, NOW)
    assert after.observed_at == LATER
    assert after.superseded_by is None
    assert after.entities == ["Berlin", "Munich"]
    assert after.source.session_id == "s1"
    assert after.source.event_ids == ["e1"]
    assert after.source.metadata[-1] == {
        "source": "manual",
        "command_id": CMD,
        "at": LATER.isoformat(),
        "corrects": old.id,
    }
    # Without a value the fact keeps its old one.
    same_value = cmd.model_copy(update={"value": None})
    assert plan.corrected(old, same_value, LATER)[1].value == "Berlin"


def test_a_deleted_memory_is_retired_not_erased() -> None:
    old = record("Prefers tea")
    gone = plan.retire(old, MemoryStatus.DELETED, LATER, LATER)
    assert (gone.status, gone.superseded_at, gone.superseded_by, gone.version, gone.text) == (
        MemoryStatus.DELETED,
        LATER,
        None,
        2,
        "Prefers tea",
    )
    change = plan.change(gone, ChangeOp.DELETED, [1.0], [CMD], LATER, "deleted")
    assert change.vector is None  # not active: the sink takes the point out


@pytest.mark.parametrize(
    ("topic", "taken"),
    [
        ("green tea", {"tea", "tea-cat", "tea-entity"}),
        ("Green  TEA", {"tea", "tea-cat", "tea-entity"}),
        ("tea", {"tea", "tea-cat", "tea-entity", "rooms"}),
        ("drinks", {"tea-cat"}),  # the category
        ("Matcha House", {"tea-entity"}),  # an entity, by name
        ("matcha", {"tea-entity"}),  # a word of an entity
        ("the", set()),  # stopwords alone: only a name would match
        ("greenhouse", {"rooms"}),
        ("coffee", set()),
    ],
)
def test_a_topic_takes_memories_naming_it_or_holding_all_its_words(topic: str, taken: set[str]) -> None:
    memories = {
        "tea": record("I love green tea in the morning", n="tea"),
        "tea-cat": record("Green tea, always", n="tea-cat", category="drinks"),
        "tea-entity": record("Meets friends for green tea", n="tea-entity", entities=["Matcha House"]),
        "rooms": record("Greenhouse tea rooms are nice", n="rooms"),
        "the": record("The end", n="the"),
    }
    assert {name for name, r in memories.items() if matches_topic(r, topic)} == taken


def test_an_outcome_lists_each_record_once_at_its_last_version_and_whether_the_index_holds_it() -> None:
    old, new = record("a", n="a"), record("b", n="b")
    retired = plan.retire(old, MemoryStatus.SUPERSEDED, NOW, NOW, by=new.id)
    changes = [
        plan.change(old, ChangeOp.UPDATED, [1.0], [CMD], NOW),
        plan.change(retired, ChangeOp.SUPERSEDED, None, [CMD], NOW),
        plan.change(new, ChangeOp.ADDED, [1.0], [CMD], NOW),
    ]
    assert plan.outcome(changes) == [
        {"id": old.id, "op": "superseded", "status": "superseded", "version": 2, "indexed": False},
        {"id": new.id, "op": "added", "status": "active", "version": 1, "indexed": True},
    ]


# --- import ---------------------------------------------------------------------------------


def document(tenant: str = "t", user: str = "u", **fields: object) -> ExportDocument:
    old = record("Lives in Berlin", n="old", status=MemoryStatus.SUPERSEDED, user=user)
    new = record("Lives in Munich", n="new", user=user)
    old = old.model_copy(update={"superseded_by": new.id, "tenant_id": tenant})
    new = new.model_copy(update={"tenant_id": tenant})
    turn = {
        "event_id": "e1",
        "tenant_id": tenant,
        "user_id": user,
        "session_id": "s1",
        "turn_index": 0,
        "role": "user",
        "content": "I moved to Munich",
        "ts": "2026-05-01T00:00:00Z",
        "metadata": {},
    }
    return ExportDocument.model_validate(
        {
            "exported_at": NOW,
            "tenant_id": tenant,
            "user_id": user,
            "embedding_model": "model-x",
            "memories": [new, old],
            "vectors": {new.id: [1.0, 0.0], old.id: [0.0, 1.0]},
            "sessions": [
                ExportedSession(
                    session_id="s1", window_turns=[turn], window_tokens=4, turn_count=1, updated_at=NOW
                ).model_dump()
            ],
            "turns": [ExportedTurn.model_validate({**turn, "archived_at": "2026-05-01T00:00:01Z"}).model_dump()],
            **fields,
        }
    )


def part_of(doc: ExportDocument, tenant: str, user: str) -> ImportPart:
    (part,) = import_parts(doc, tenant, user, stable_id("import"), LATER, 900 * 1024)
    return part


def test_an_import_maps_every_id_and_history_link_under_the_importing_users_key() -> None:
    doc = document()
    part = part_of(doc, "t2", "v")
    old, new = doc.memories[1], doc.memories[0]
    key = new_data_key("t2", "v")
    got = plan.imported_memories(part, "model-x", key)
    assert [i.doc_id for i in got] == [old.id, new.id]  # retired rows first
    assert all(i.record.tenant_id == "t2" and i.record.user_id == "v" for i in got)
    mapped = {i.doc_id: i.record.id for i in got}
    assert mapped == {d: key.memory_id(stable_id("import", "t2", "v", d)) for d in (old.id, new.id)}
    assert got[0].record.superseded_by == mapped[new.id]
    assert [i.vector for i in got] == [[0.0, 1.0], [1.0, 0.0]]
    # Another model's vectors are not ours: the texts get embedded again.
    assert [i.vector for i in plan.imported_memories(part, "model-y", key)] == [None, None]
    (turn,) = plan.imported_turns(part)
    (session,) = plan.imported_sessions(part)
    assert (turn.tenant_id, turn.user_id, turn.content) == ("t2", "v", "I moved to Munich")
    assert (session.window_turns[0].tenant_id, session.window_turns[0].user_id) == ("t2", "v")


def test_no_imported_id_is_the_documents_own_and_the_same_user_always_gets_the_same_ids() -> None:
    """Even restoring a user's own document: a document's ids are never written, whoever holds them."""
    doc = document()
    key = new_data_key("t", "u")
    home = plan.imported_memories(part_of(doc, "t", "u"), "model-x", key)
    assert not {i.record.id for i in home} & {m.id for m in doc.memories}
    again = plan.imported_memories(part_of(doc, "t", "u"), "model-x", key)
    assert [i.record for i in again] == [i.record for i in home]
    elsewhere = plan.imported_memories(part_of(doc, "t2", "u"), "model-x", new_data_key("t2", "u"))
    assert not {i.record.id for i in elsewhere} & {i.record.id for i in home}
    with pytest.raises(ValueError, match="own key"):
        plan.imported_memories(part_of(doc, "t2", "v"), "model-x", key)


def test_a_large_document_splits_into_parts_under_the_message_limit_in_order() -> None:
    base = document()
    many = [
        record(f"memory number {i} " + "words " * 200, n=str(i)).model_copy(update={"observed_at": NOW})
        for i in range(60)
    ]
    doc = base.model_copy(update={"memories": many, "vectors": {r.id: [0.5] * 384 for r in many}})
    limit = 64 * 1024
    parts = import_parts(doc, "t2", "v", stable_id("import"), LATER, limit)
    assert len(parts) > 2
    assert [p.part for p in parts] == list(range(len(parts)))
    assert {p.parts for p in parts} == {len(parts)}
    assert all(len(codec.dumps(p)) <= limit for p in parts)
    assert [r.id for p in parts for r in p.memories] == [r.id for r in many]
    assert all(set(p.vectors) == {r.id for r in p.memories} for p in parts)
    assert [t.event_id for p in parts for t in p.turns] == ["e1"]
    assert len({p.command_id for p in parts}) == len(parts)
    with pytest.raises(ItemTooLarge):
        import_parts(doc, "t2", "v", stable_id("import"), LATER, 4096 + 1000)
    empty = ExportDocument(exported_at=NOW, tenant_id="t", user_id="u")
    assert len(import_parts(empty, "t2", "v", stable_id("import"), LATER, limit)) == 1


# --- contracts ----------------------------------------------------------------------------------


def test_commands_are_told_apart_by_kind_and_unknown_kinds_are_refused() -> None:
    envelope = {"command_id": CMD, "tenant_id": "t", "user_id": "u", "at": NOW.isoformat()}
    access = {**envelope, "kind": "access", "memory_ids": [stable_id("m")]}
    assert isinstance(command_adapter.validate_python(access), AccessCommand)
    assert isinstance(CommandMessage.model_validate({**envelope, "kind": "forget"}).root, ForgetUser)
    topic = command_adapter.validate_json(orjson.dumps({**envelope, "kind": "delete_topic", "topic": "tea"}))
    assert isinstance(topic, DeleteTopic)
    for bad in ({**envelope, "kind": "explode"}, {**envelope}, {**envelope, "kind": "forget", "extra": 1}):
        with pytest.raises(ValidationError):
            command_adapter.validate_python(bad)
    assert codec.loads(CommandMessage, codec.dumps(add())).root == add()


def test_memory_changes_carry_record_changes_and_forgotten_users() -> None:
    change = MemoryChange(
        tenant_id="t", user_id="u", op=ChangeOp.ADDED, record=record("x"), cause=[CMD], committed_at=NOW
    )
    gone = UserForgotten(tenant_id="t", user_id="u", cause=[CMD], committed_at=NOW, deleted_rows={"memories": 2})
    assert codec.loads(ChangeMessage, codec.dumps(change)).root == change
    assert codec.loads(ChangeMessage, codec.dumps(gone)).root == gone
    assert gone.key == b"t:u"
    broken = orjson.loads(codec.dumps(change))
    del broken["record"]
    with pytest.raises(ValidationError, match="record"):
        ChangeMessage.model_validate(broken)
