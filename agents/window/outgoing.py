"""What the window stage sends after a commit, as outbox rows with deterministic ids."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

from agents.rules.candidates import candidates_for_turn
from agents.window.logic import split_by_size
from schemas import EvictedChunk, SessionEvent, TurnEvent, codec, partition_key
from services.archive.codec import DataKey, seal
from services.core import topics
from services.core.textutil import stable_id
from services.stores.postgres import OutboxMessage


def scope_of(tenant_id: str, user_id: str) -> str:
    return partition_key(tenant_id, user_id).decode()


def evicted_messages(
    cause: TurnEvent | SessionEvent,
    turns: list[TurnEvent],
    *,
    reason: Literal["trimmed", "session_end"],
    max_bytes: int,
) -> list[OutboxMessage]:
    """One chunk per run of turns that fits in a message; `cause` is the event that evicted them."""
    tenant_id, user_id, session_id = cause.tenant_id, cause.user_id, cause.session_id
    out = []
    for part, run in enumerate(split_by_size(turns, max_bytes) if turns else []):
        chunk = EvictedChunk(
            tenant_id=tenant_id,
            user_id=user_id,
            session_id=session_id,
            reason=reason,
            turns=run,
            cause=[cause.event_id],
        )
        out.append(
            OutboxMessage(
                id=stable_id("outbox", tenant_id, user_id, cause.event_id, "evicted", str(part)),
                scope=scope_of(tenant_id, user_id),
                topic=topics.EVICTED,
                key=chunk.key,
                value=codec.dumps(chunk),
            )
        )
    return out


def candidate_messages(turn: TurnEvent, before: Sequence[TurnEvent] = ()) -> list[OutboxMessage]:
    """The rule stage's candidates for an accepted turn; `before`: its context turns."""
    return [
        OutboxMessage(
            id=stable_id("outbox", turn.tenant_id, turn.user_id, turn.event_id, "candidate", str(i)),
            scope=scope_of(turn.tenant_id, turn.user_id),
            topic=topics.CANDIDATES,
            key=candidate.key,
            value=codec.dumps(candidate),
        )
        for i, candidate in enumerate(candidates_for_turn(turn, before))
    ]


def archive_messages(
    events: Sequence[TurnEvent | SessionEvent], keys: Mapping[tuple[str, str], DataKey]
) -> list[OutboxMessage]:
    """memory.archive records of accepted events, each sealed with its user's key from `keys`.

    Sealed once, when the event is accepted: the outbox row keeps the
    ciphertext, so a resend after a crash sends the same bytes.
    """
    return [
        OutboxMessage(
            id=stable_id("outbox", event.tenant_id, event.user_id, event.event_id, "archive"),
            scope=scope_of(event.tenant_id, event.user_id),
            topic=topics.ARCHIVE,
            key=event.key,
            value=seal(keys[(event.tenant_id, event.user_id)], event),
        )
        for event in events
    ]
