"""What the OpenAPI document says about the service as a whole: its description and tag groups.

Kept out of app.py so the factory stays about wiring; each route's own
summary, tag and error statuses sit on its decorator.
"""

from __future__ import annotations

from typing import Any

DESCRIPTION = """\
Long-term memory for chat assistants, fed by the `chat.turns` Kafka topic.

Every `/v1` route is scoped by tenant **and** user and needs `Authorization: Bearer <API key>`
(`memstream keys create`); `/healthz`, `/readyz` and `/metrics` are open.

Every error answers `{"error": {"code": "...", "message": "..."}}`; a `validation_error`
(422) also lists the fields in `error.details`. A 503 carries `Retry-After`. Quote the
`x-request-id` response header when reporting a problem: the server log has the details under it.
"""

RECALL = "recall"
INGEST = "ingest"
MEMORIES = "memories"
SESSIONS = "sessions"
OPERATIONS = "operations"

TAGS: list[dict[str, Any]] = [
    {"name": RECALL, "description": "Ask what memory holds for a user, ranked and packed for a prompt."},
    {"name": INGEST, "description": "Send chat turns over HTTP, for services that do not speak Kafka."},
    {
        "name": MEMORIES,
        "description": "One user's memories: list, history, add, correct, delete, forget, export, import. "
        "Every change is a command on `memory.commands`, applied in order with the user's other changes.",
    },
    {"name": SESSIONS, "description": "A session's working window: the recent turns not yet folded into memory."},
    {"name": OPERATIONS, "description": "Liveness, readiness and Prometheus metrics; no tenant data, no key needed."},
]
