"""What every memory command route shares: its target, its 404, and producing then (maybe) waiting.

A command is produced to `memory.commands` and applied by the consolidator's
commands stage, in order with the user's other commands. The answer is 202
with the command id once the broker has it; `?wait=true` answers 200 once the
change shows in Postgres and the recall index (services/api/command_log.py),
so a client can read its own write; on a read replica, once every other
serving replica has applied it too, so the client's next read may reach
any of them. A waiting request's deadline is
MEMSTREAM_HTTP_REQUEST_TIMEOUT plus MEMSTREAM_COMMAND_WAIT_TIMEOUT
(services.api.limits.request_budget); a wait that runs out answers 202.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any, TypedDict

from fastapi import Depends, HTTPException, Response

from schemas.commands import AnyCommand
from services.api.auth import CurrentPrincipal, tenant_scope
from services.api.command_log import CommandLog, wait_until_applied
from services.api.command_models import AppliedChange, CommandReceipt, TenantOptQ, Wait
from services.api.models import UserPath
from services.auth import Principal
from services.runtime import Runtime
from services.stores.postgres.commands import CommandStore

# Left of the request deadline for answering once a wait gives up.
_ANSWER_MARGIN = 0.25
ACCEPTED: dict[int | str, dict[str, Any]] = {
    200: {"model": CommandReceipt, "description": "`?wait=true`: applied, visible in Postgres and the index"}
}


def command_tenant(principal: Principal, *named: str | None) -> str:
    """The tenant from the query string or the body (they must agree), else the key's."""
    given = {t for t in named if t is not None}
    if len(given) > 1:
        raise HTTPException(422, "tenant_id in the query string and in the body differ")
    return tenant_scope(principal, next(iter(given), None))


def not_found(what: str) -> HTTPException:
    return HTTPException(404, f"no {what} for this tenant and user")


def now() -> datetime:
    return datetime.now(UTC)


class Envelope(TypedDict):
    """The fields every command starts with."""

    command_id: str
    tenant_id: str
    user_id: str
    at: datetime


@dataclass(frozen=True)
class CommandTarget:
    """The parameters every command route takes besides its own: the user, the key, `?tenant_id`, `?wait`.

    `started` is when the request reached the route: a wait is cut to what is left of the request's deadline.
    """

    user_id: str
    principal: Principal
    query_tenant: str | None
    wait: bool
    response: Response
    started: float

    def tenant(self, body_tenant: str | None = None) -> str:
        """The tenant the command acts in; a route whose body may name one passes it (see `command_tenant`)."""
        return command_tenant(self.principal, self.query_tenant, body_tenant)

    def envelope(self, tenant: str) -> Envelope:
        """A new command's id, tenant, user and time."""
        return Envelope(command_id=str(uuid.uuid4()), tenant_id=tenant, user_id=self.user_id, at=now())


async def command_target(
    user_id: UserPath, principal: CurrentPrincipal, response: Response, tenant_id: TenantOptQ = None, wait: Wait = False
) -> CommandTarget:
    return CommandTarget(user_id, principal, tenant_id, wait, response, time.monotonic())


Target = Annotated[CommandTarget, Depends(command_target)]


# `seconds` -> whether every other read replica holds what this one does (services/api/replica.py).
PeersReached = Callable[[float], Awaitable[bool]]


class CommandSubmitter:
    """Produces a route's commands and builds its answer; one producer for every command route of the app."""

    def __init__(self, rt: Runtime, store: CommandStore, peers: PeersReached | None = None) -> None:
        self._rt = rt
        self._store = store  # where the commands stage records what each command changed
        self._log = CommandLog(rt.settings)
        self._peers = peers

    async def submit(
        self,
        target: CommandTarget,
        commands: Sequence[AnyCommand],
        *,
        memory_id: str | None = None,
        command_id: str | None = None,
    ) -> CommandReceipt:
        """Every command acknowledged by the broker (202); with `wait`, applied and indexed too (200), if in time."""
        settings = self._rt.settings
        first = commands[0]
        await self._log.send(commands)
        receipt = CommandReceipt(
            command_id=command_id or first.command_id,
            kind=first.kind,
            status="accepted",
            memory_id=memory_id,
            parts=len(commands) if first.kind == "import" else None,
        )
        if not target.wait:
            return receipt
        # The request's deadline is http_request_timeout + command_wait_timeout (services.api.limits).
        left = settings.http_request_timeout + settings.command_wait_timeout - _ANSWER_MARGIN
        changes = await wait_until_applied(
            self._rt,
            self._store,
            first.tenant_id,
            first.user_id,
            [c.command_id for c in commands],
            forget=first.kind == "forget",
            seconds=min(settings.command_wait_timeout, left - (time.monotonic() - target.started)),
        )
        if changes is None:
            return receipt
        # On a read replica, 200 means any replica answers with the change: the others must have applied it too.
        if self._peers is not None and not await self._peers(left - (time.monotonic() - target.started)):
            return receipt
        target.response.status_code = 200
        return receipt.model_copy(
            update={"status": "applied", "changes": [AppliedChange.model_validate(c) for c in changes]}
        )

    async def close(self) -> None:
        await self._log.close()
