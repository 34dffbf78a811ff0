"""Memory candidates, records and the public `memory.changes` contract."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from schemas.events import TurnEvent, partition_key
from schemas.validation import Identifier

SCHEMA_VERSION: Literal[1] = 1
# Preceding turns an exchange keeps as its context (backward only: a later turn never changes it).
CONTEXT_TURNS = 2

# Preference categories that hold whatever the user asks: what they cannot eat, how they want answers.
# Recall pins them in every answer, where other preferences must be close to the query.
CONSTRAINT, INSTRUCTION = "constraint", "instruction"
STANDING_CATEGORIES = (CONSTRAINT, INSTRUCTION)
# A preference that takes earlier ones back ("I'm no longer vegetarian"); its `value` names what it takes back.
RETRACTION = "retraction"

# Memory ids are UUIDs (deterministic uuid5 in our stages): Qdrant accepts
# nothing else as a point id, so a bad one must fail validation, not indexing.
# A Postgres `integer` column: what the store holds is what the contract admits.
Int32 = 2**31 - 1
MemoryId = Annotated[
    str, Field(pattern=r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")
]


class MemoryType(StrEnum):
    FACT = "fact"  # keyed profile fact: category/key/value, superseded by a new value
    PREFERENCE = "preference"
    EPISODE = "episode"  # summary of a stretch of conversation
    EXCHANGE = "exchange"  # a raw user turn, so what was said stays findable
    SEMANTIC = "semantic"  # a topic the user engaged in across sessions, synthesized
    PATTERN = "pattern"  # the common theme of several similar episodes
    QUESTION = "question"  # something the user asked that was not resolved


class MemoryLayer(StrEnum):
    """The layers recall presents memory in: how to act, what is true, what happened, the current window."""

    PROCEDURAL = "procedural"  # how to act for this user: preferences, instructions
    SEMANTIC = "semantic"  # what is true: facts, synthesized topics, patterns
    EPISODIC = "episodic"  # what happened: episodes, exchanges, open questions
    WORKING = "working"  # the session's current window


LAYER_OF_TYPE: dict[MemoryType, MemoryLayer] = {
    MemoryType.PREFERENCE: MemoryLayer.PROCEDURAL,
    MemoryType.FACT: MemoryLayer.SEMANTIC,
    MemoryType.SEMANTIC: MemoryLayer.SEMANTIC,
    MemoryType.PATTERN: MemoryLayer.SEMANTIC,
    MemoryType.EPISODE: MemoryLayer.EPISODIC,
    MemoryType.EXCHANGE: MemoryLayer.EPISODIC,
    MemoryType.QUESTION: MemoryLayer.EPISODIC,
}


class MemoryStatus(StrEnum):
    ACTIVE = "active"
    SUPERSEDED = "superseded"  # a newer value of the same keyed fact or topic replaced it
    MERGED = "merged"  # folded into a near-duplicate; `superseded_by` is the survivor
    PRUNED = "pruned"  # faded below the importance floor unaccessed
    DELETED = "deleted"


class QuestionState(StrEnum):
    OPEN = "open"
    TENTATIVELY_RESOLVED = "tentatively_resolved"
    DEFERRED = "deferred"


class Question(BaseModel):
    """What a `question` memory tracks beyond its text."""

    model_config = ConfigDict(frozen=True)

    state: QuestionState = QuestionState.OPEN
    attempts: int = 0
    related: list[str] = Field(default_factory=list)  # entities and topics it touches


class ChangeOp(StrEnum):
    ADDED = "added"
    UPDATED = "updated"
    SUPERSEDED = "superseded"
    MERGED = "merged"
    DELETED = "deleted"


class Provenance(BaseModel):
    model_config = ConfigDict(frozen=True)

    session_id: Identifier
    event_ids: list[str]
    metadata: list[dict[str, Any]] = Field(default_factory=list)


class _Keyed(BaseModel):
    model_config = ConfigDict(frozen=True)
    tenant_id: Identifier
    user_id: Identifier

    @property
    def key(self) -> bytes:
        return partition_key(self.tenant_id, self.user_id)


class EvictedChunk(_Keyed):
    """Turns that left a working window, in order; `reason` says why."""

    schema_version: Literal[1] = SCHEMA_VERSION
    session_id: Identifier
    reason: Literal["trimmed", "session_end"]
    turns: list[TurnEvent]
    cause: list[str]


class MemoryCandidate(_Keyed):
    """An unembedded proposal for long-term memory; the consolidator decides."""

    schema_version: Literal[1] = SCHEMA_VERSION
    candidate_id: MemoryId
    type: MemoryType
    text: str
    category: str | None = None
    key_name: str | None = None
    value: str | None = None
    importance: float = Field(ge=0.0, le=1.0)
    confidence: float = Field(ge=0.0, le=1.0)
    observed_at: AwareDatetime
    entities: list[str] = Field(default_factory=list)
    source: Provenance
    extractor: str
    question: Question | None = None  # set on `question` candidates
    # Exchanges: the texts of the turns just before this one in its session (any role), oldest first.
    # Recall matches the turn together with them (services/stores/vector.py: context legs) and still
    # returns only the turn; a question answered by "yes, in May" is found through what was asked.
    context: list[str] = Field(default_factory=list, max_length=CONTEXT_TURNS)


class EmbeddedCandidate(_Keyed):
    schema_version: Literal[1] = SCHEMA_VERSION
    candidate: MemoryCandidate
    vector: list[float]
    model: str
    # The dense vector of the candidate's context window (services.stores.vector.dense_context_text);
    # None when the candidate has no context.
    context_vector: list[float] | None = None


class MemoryRecord(BaseModel):
    """The full state of one memory row, as Postgres holds it."""

    model_config = ConfigDict(frozen=True)

    id: MemoryId
    tenant_id: Identifier
    user_id: Identifier
    type: MemoryType
    text: str
    content_hash: str
    category: str | None = None
    key_name: str | None = None
    value: str | None = None
    importance: float
    confidence: float
    status: MemoryStatus
    observed_at: AwareDatetime
    created_at: AwareDatetime
    updated_at: AwareDatetime
    superseded_at: datetime | None = None
    superseded_by: str | None = None
    source: Provenance
    entities: list[str] = Field(default_factory=list)
    access_count: int = Field(default=0, ge=0, le=Int32)
    reinforcement_count: int = Field(default=0, ge=0, le=Int32)
    version: int = Field(default=1, ge=1, le=Int32)
    last_accessed_at: AwareDatetime | None = None
    # Folded into a pattern: kept, but out of default recall.
    compressed: bool = False
    question: Question | None = None
    # The candidate's context (MemoryCandidate.context): fixed for the life of the record.
    context: list[str] = Field(default_factory=list, max_length=CONTEXT_TURNS)


class MemoryChange(_Keyed):
    """Published after every committed change, with the whole record.

    `version` grows by one per change to a record, so subscribers can drop the
    duplicates that at-least-once delivery may hand them.
    """

    schema_version: Literal[1] = SCHEMA_VERSION
    op: ChangeOp
    record: MemoryRecord
    vector: list[float] | None = None
    # The dense vector of the record's context window, when the change carries it (a record's context never
    # changes, so a change without it leaves the index's as it is: agents/qdrant_sink).
    context_vector: list[float] | None = None
    cause: list[str]
    committed_at: AwareDatetime
    turn_ts: AwareDatetime | None = None
    # Why, when the op alone does not say (a prune's threshold, a merge's similarity).
    reason: str | None = None
