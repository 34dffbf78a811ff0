"""HTTP bodies and answers of the memory command routes (services/api/command_routes.py, transfer_routes.py).

A body that is a command may name its tenant (`tenant_id`), like the query
string of the other routes; the memory fields themselves are the command's
own (schemas.commands), so HTTP and the log accept exactly the same things.
"""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import Query
from pydantic import BaseModel, ConfigDict, Field

from schemas import Identifier
from schemas.commands import KEYED_RULE, Label, ManualMemory, MemoryText
from schemas.export import EXAMPLE, ExportDocument

_MEMORY_ID = "0e5c2d6e-7f1a-4c3b-9d2e-5a6b7c8d9e0f"
_COMMAND_ID = "5b0f1a52-8c1e-4d2a-9e3f-7a6b5c4d3e2f"

TenantOptQ = Annotated[
    Identifier | None,
    Query(description="Tenant that owns the memory; required with an operator key, else the API key's tenant"),
]
Wait = Annotated[
    bool,
    Query(
        description="Answer 200 once the change shows in Postgres and the recall index (read your own write), "
        "or 202 if it does not within MEMSTREAM_COMMAND_WAIT_TIMEOUT",
    ),
]
Topic = Annotated[
    Label,
    Query(
        openapi_examples={"a topic": {"value": "green tea"}},
        description="A topic or entity: memories whose category, key or entity it names, or whose text "
        "holds every content word of it",
    ),
]
WithVectors = Annotated[bool, Query(description="Include each memory's embedding (`vectors`, `embedding_model`)")]


class AddMemoryRequest(ManualMemory):
    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        json_schema_extra={
            **KEYED_RULE,
            "examples": [
                {"type": "preference", "text": "Prefers aisle seats on long flights"},
                {
                    "type": "fact",
                    "text": "Lives in Berlin",
                    "category": "location",
                    "key_name": "city",
                    "value": "Berlin",
                },
            ],
        },
    )

    tenant_id: Identifier | None = Field(default=None, description="Tenant (as in the query string)")


class CorrectMemoryRequest(BaseModel):
    model_config = ConfigDict(
        extra="forbid", json_schema_extra={"examples": [{"text": "Lives in Munich", "value": "Munich"}]}
    )

    tenant_id: Identifier | None = Field(default=None, description="Tenant (as in the query string)")
    text: MemoryText = Field(description="The corrected text; the new version is re-embedded and re-indexed")
    value: MemoryText | None = Field(default=None, description="A keyed fact's corrected value (default: unchanged)")


class ImportRequest(BaseModel):
    """The document goes in a field of its own: its `tenant_id` names where it came from, not where it goes."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{"document": EXAMPLE}]})

    tenant_id: Identifier | None = Field(default=None, description="Tenant to import into (as in the query string)")
    document: ExportDocument = Field(description="A `memstream.export/v1` document, as the export route gives it")


class AppliedChange(BaseModel):
    id: str = Field(description="The memory changed", examples=[_MEMORY_ID])
    op: str = Field(description="As on `memory.changes`: added, updated, superseded, merged, deleted")
    status: str = Field(description="The memory's status after the change")
    version: int = Field(description="The memory's version after the change")


class CommandReceipt(BaseModel):
    """202: the broker has the command; 200 (`?wait=true`): it shows in Postgres and the index."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {"command_id": _COMMAND_ID, "kind": "add", "status": "accepted", "memory_id": _MEMORY_ID},
                {
                    "command_id": _COMMAND_ID,
                    "kind": "delete",
                    "status": "applied",
                    "changes": [{"id": _MEMORY_ID, "op": "deleted", "status": "deleted", "version": 3}],
                },
            ]
        }
    )

    command_id: str = Field(description="In `cause` of every change the command makes on `memory.changes`")
    kind: str = Field(description="add, correct, delete, delete_session, delete_topic, forget, import")
    status: Literal["accepted", "applied"]
    memory_id: str | None = Field(
        default=None,
        description="add, correct: the id of the memory written (an add repeating an active memory word for word "
        "reinforces that one instead: `changes` then names it)",
    )
    parts: int | None = Field(default=None, description="import: how many commands the document was sent as")
    changes: list[AppliedChange] | None = Field(default=None, description="With status applied: what changed")
