"""What the read service (and operators) send on `memory.commands`.

Writes never happen on the read path: a command goes through the log, so the
consolidator applies it in order with the user's other changes, and
subscribers and replays see it.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from schemas.events import partition_key
from schemas.memory import MemoryId
from schemas.validation import Identifier

SCHEMA_VERSION: Literal[1] = 1
# `MemoryChange.reason` of a change that only records access. The recall index
# does not follow those: recall reads access from Postgres, so reads never
# cost index writes.
ACCESS_REASON = "access"


class AccessCommand(BaseModel):
    """Recall returned these memories at `at`: their access count and last access move."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    schema_version: Literal[1] = SCHEMA_VERSION
    kind: Literal["access"] = "access"
    # Deterministic per recall, so a redelivered command is applied once.
    command_id: MemoryId
    tenant_id: Identifier
    user_id: Identifier
    memory_ids: Annotated[list[MemoryId], Field(min_length=1, max_length=100)]
    at: AwareDatetime

    @property
    def key(self) -> bytes:
        return partition_key(self.tenant_id, self.user_id)


MemoryCommand = AccessCommand
