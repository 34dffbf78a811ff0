"""What the read service (and operators) send on `memory.commands`, and the one change only a command makes.

Writes never happen on the read path: a command goes through the log, so the
consolidator's commands stage applies it in order with the user's other
commands, and subscribers and replays see it. Every kind shares the envelope
(`command_id`, `tenant_id`, `user_id`, `at`, keyed `tenant:user`) and is told
apart by `kind`.

A command never carries a vector: the commands stage embeds new text with the
worker's model, batched, so a replay of the log re-derives the same memory and
the HTTP request never waits for a model.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal, Self

from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    RootModel,
    StringConstraints,
    TypeAdapter,
    model_validator,
)

from schemas.events import partition_key
from schemas.export import ExportedSession, ExportedSummary, ExportedTurn
from schemas.memory import MemoryChange, MemoryId, MemoryRecord, MemoryType
from schemas.validation import Identifier, clean_text, fail

SCHEMA_VERSION: Literal[1] = 1
# `MemoryChange.reason` of a change that only records access. The recall index
# does not follow those: recall reads access from Postgres, so reads never
# cost index writes.
ACCESS_REASON = "access"
# The provenance session of a memory added by hand without naming a session.
MANUAL_SESSION = "manual"
# `source.metadata[*].source` of every memory a command wrote.
MANUAL_SOURCE = "manual"
MEMORY_TEXT_MAX_CHARS = 8_000
LABEL_MAX_CHARS = 200
MAX_ENTITIES = 50


# Some character that is neither a control character nor white space: what makes text more than blank.
# A search (JSON Schema's `pattern` is unanchored), in the subset ECMA-262 and Python read alike.
VISIBLE = r"[^\u0000-\u0020\u007f-\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff]"


def _text(value: str) -> str:
    """Like turn content: C0 control characters dropped, NFC; surrounding white space trimmed."""
    return clean_text(value).strip()


MemoryText = Annotated[
    str, StringConstraints(min_length=1, max_length=MEMORY_TEXT_MAX_CHARS, pattern=VISIBLE), AfterValidator(_text)
]
# Category, key, entity and topic names.
Label = Annotated[
    str, StringConstraints(min_length=1, max_length=LABEL_MAX_CHARS, pattern=VISIBLE), AfterValidator(_text)
]
# `key_name` needs `category`, `value` needs `key_name`: the validator's rule, for the JSON Schema too.
KEYED_RULE: dict[str, Any] = {
    "allOf": [
        {
            "if": {"properties": {"key_name": {"type": "string"}}, "required": ["key_name"]},
            "then": {"properties": {"category": {"type": "string"}}, "required": ["category"]},
        },
        {
            "if": {"properties": {"value": {"type": "string"}}, "required": ["value"]},
            "then": {"properties": {"key_name": {"type": "string"}}, "required": ["key_name"]},
        },
    ]
}


class _Command(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    schema_version: Literal[1] = SCHEMA_VERSION
    # Chosen by the read service; a redelivered command is applied once (applied_commands).
    command_id: MemoryId
    tenant_id: Identifier
    user_id: Identifier
    # When the command was issued: a new memory's observed_at, an old version's superseded_at.
    at: AwareDatetime

    @property
    def key(self) -> bytes:
        return partition_key(self.tenant_id, self.user_id)


class AccessCommand(_Command):
    """Recall returned these memories: their access count and last access move.

    The read service coalesces a window of recalls into one command per user:
    `counts[i]` recalls returned `memory_ids[i]`, the latest at
    `last_accessed[i]`. Without them (a command of one recall) each counts
    once, at `at`.
    """

    kind: Literal["access"] = "access"
    memory_ids: Annotated[list[MemoryId], Field(min_length=1, max_length=100)]
    counts: Annotated[list[Annotated[int, Field(ge=1)]], Field(min_length=1, max_length=100)] | None = None
    last_accessed: Annotated[list[AwareDatetime], Field(min_length=1, max_length=100)] | None = None

    @model_validator(mode="after")
    def _parallel(self) -> Self:
        for name, values in (("counts", self.counts), ("last_accessed", self.last_accessed)):
            if values is not None and len(values) != len(self.memory_ids):
                fail("access_lengths", f"{name} needs one entry per memory id")
        return self

    def marks(self) -> list[tuple[str, int, datetime]]:
        """(memory id, how many recalls, the latest of them) for each memory the command names."""
        if self.counts is None and self.last_accessed is None:
            return [(memory_id, 1, self.at) for memory_id in dict.fromkeys(self.memory_ids)]
        counts = self.counts or [1] * len(self.memory_ids)
        last = self.last_accessed or [self.at] * len(self.memory_ids)
        return list(zip(self.memory_ids, counts, last, strict=True))


class ManualMemory(BaseModel):
    """What a person says a memory is: shared by the HTTP body and the command it becomes."""

    model_config = ConfigDict(frozen=True, extra="forbid", json_schema_extra=KEYED_RULE)

    type: MemoryType = Field(description="What kind of memory: a keyed `fact`, a `preference`, an `episode`, ...")
    text: MemoryText = Field(description="The memory as recall shows it")
    category: Label | None = Field(
        default=None,
        description="A keyed fact's category (e.g. `location`); a preference's `constraint` (an allergy, a diet) "
        "or `instruction` (how to answer) pins it in every recall",
    )
    key_name: Label | None = Field(default=None, description="A keyed fact's key (e.g. `city`). Needs `category`")
    value: MemoryText | None = Field(default=None, description="A keyed fact's value (e.g. `Berlin`). Needs `key_name`")
    importance: float = Field(default=0.8, ge=0.0, le=1.0, description="0 to 1; recall ranks by it")
    entities: Annotated[list[Label], Field(max_length=MAX_ENTITIES)] = Field(
        default_factory=list, description="Names it is about; capitalised names in the text are added"
    )
    session_id: Identifier = Field(
        default=MANUAL_SESSION, description=f"The session it comes from, for provenance (default `{MANUAL_SESSION}`)"
    )

    @model_validator(mode="after")
    def _keyed(self) -> Self:
        if self.key_name is not None and self.category is None:
            fail("key_without_category", "key_name needs a category")
        if self.value is not None and self.key_name is None:
            fail("value_without_key", "value needs a category and a key_name")
        return self


class AddMemory(_Command, ManualMemory):
    """A memory added by hand, decided like any candidate: a word-for-word repeat reinforces, a new value
    of a keyed fact supersedes the old one, anything else is added as `memory_id`."""

    kind: Literal["add"] = "add"
    memory_id: MemoryId


class CorrectMemory(_Command):
    """New text for an active memory: version `new_id` supersedes `memory_id`, which stays in history."""

    kind: Literal["correct"] = "correct"
    memory_id: MemoryId
    new_id: MemoryId
    text: MemoryText
    # A keyed fact's new value; None keeps the old one.
    value: MemoryText | None = None


class DeleteMemory(_Command):
    """One memory leaves recall and the index; its row stays as `deleted` (a tombstone replays respect)."""

    kind: Literal["delete"] = "delete"
    memory_id: MemoryId


class DeleteSession(_Command):
    """Every active memory whose provenance names this session."""

    kind: Literal["delete_session"] = "delete_session"
    session_id: Identifier


class DeleteTopic(_Command):
    """Every active memory about a topic or entity (the rule: services.core.command_rules.matches_topic)."""

    kind: Literal["delete_topic"] = "delete_topic"
    topic: Label


class ForgetUser(_Command):
    """Everything held on the user: every row naming them in Postgres, every index point."""

    kind: Literal["forget"] = "forget"


class ImportPart(_Command):
    """One part of an imported export document (split to stay under the broker's message limit).

    Records, turns and sessions are written as the document has them, under
    this command's tenant and user; `source_*` say whose document it was, which
    decides whether memory ids are kept (see schemas.export).
    """

    kind: Literal["import"] = "import"
    import_id: MemoryId
    part: int = Field(ge=0)
    parts: int = Field(ge=1)
    source_tenant_id: Identifier
    source_user_id: Identifier
    embedding_model: str | None = None
    memories: list[MemoryRecord] = Field(default_factory=list)
    vectors: dict[str, list[float]] = Field(default_factory=dict)
    turns: list[ExportedTurn] = Field(default_factory=list)
    sessions: list[ExportedSession] = Field(default_factory=list)
    session_summaries: list[ExportedSummary] = Field(default_factory=list)


AnyCommand = (
    AccessCommand | AddMemory | CorrectMemory | DeleteMemory | DeleteSession | DeleteTopic | ForgetUser | ImportPart
)
MemoryCommand = Annotated[AnyCommand, Field(discriminator="kind")]
command_adapter: TypeAdapter[AnyCommand] = TypeAdapter(MemoryCommand)


class CommandMessage(RootModel[MemoryCommand]):
    """A `memory.commands` message, for code that parses by model (the agents' batches)."""

    model_config = ConfigDict(frozen=True)


class UserForgotten(BaseModel):
    """Published on `memory.changes` when a user was forgotten: no record, only the scope.

    A subscriber drops everything it holds for this tenant and user. It is the
    one message on `memory.changes` that is not a MemoryChange; `op` tells them
    apart. It carries no memory text, so the log does not repeat what was forgotten.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    schema_version: Literal[1] = SCHEMA_VERSION
    op: Literal["forgotten"] = "forgotten"
    tenant_id: Identifier
    user_id: Identifier
    cause: list[str]
    committed_at: AwareDatetime
    # Rows removed, by table: an audit figure, no content.
    deleted_rows: dict[str, int] = Field(default_factory=dict)

    @property
    def key(self) -> bytes:
        return partition_key(self.tenant_id, self.user_id)


def _change_kind(data: Any) -> str:
    op = data.get("op") if isinstance(data, dict) else getattr(data, "op", None)
    return "forgotten" if op == "forgotten" else "change"


class ChangeMessage(RootModel[MemoryChange | UserForgotten]):
    """A `memory.changes` message: a record's new state, or a forgotten user."""

    model_config = ConfigDict(frozen=True)

    @model_validator(mode="wrap")
    @classmethod
    def _by_op(cls, data: Any, handler: Any) -> Any:
        """Dispatch on `op`, so a bad change reports the MemoryChange errors, not both models'."""
        if isinstance(data, dict) and _change_kind(data) == "forgotten":
            return cls(root=UserForgotten.model_validate(data))
        if isinstance(data, dict):
            return cls(root=MemoryChange.model_validate(data))
        return handler(data)
