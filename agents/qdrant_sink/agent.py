"""qdrant sink: the recall index follows `memory.changes`, idempotently (services/stores/index_feed.py).

Changes arrive sealed per user (services/archive/changes.py); each batch is
opened with one lookup of its users' keys. A change whose key is gone (the
user was forgotten) or that does not open is skipped and counted in
`memstream_changes_skipped_total{stage, reason}`, not dead-lettered: it is
no bad input, it is what forgetting is for. A value that is no message of
the topic at all goes to the DLQ as a schema violation, and a batch the
index refuses is dead-lettered item by item (agents/stage.py), as in every
stage and in the read service's follower of a rebuilt generation
(services/api/index_follower.py), which applies the same code.
"""

from __future__ import annotations

import faust

from agents.stage import batched_agent
from agents.topics import Topics
from schemas.changes import SealedChangeMessage
from services.archive.changes import FORGOTTEN, UNREADABLE, open_messages
from services.core import metrics
from services.core.faults import crash_point
from services.core.stages import INDEX_STAGE
from services.runtime import Runtime
from services.stores.index_feed import apply_changes, count_skipped

STAGE = INDEX_STAGE


def register(app: faust.App, topics: Topics, rt: Runtime) -> None:
    s = rt.settings

    rt.open_keys()  # the master key now: changes are opened with the users' keys
    for reason in (FORGOTTEN, UNREADABLE):  # both series exist from the start
        metrics.CHANGES_SKIPPED.labels(stage=STAGE, reason=reason)

    async def handle(messages: list[SealedChangeMessage]) -> None:
        changes, skipped = await open_messages(rt.keys, [message.root for message in messages])
        await apply_changes(rt, changes)
        count_skipped(STAGE, skipped)
        crash_point(s, "qdrant_sink.after_index")

    batched_agent(
        app,
        topics.changes,
        topics.dlq,
        s,
        keys=rt.keys,
        stage=STAGE,
        model=SealedChangeMessage,
        size=s.consolidate_batch_size,
        within=s.index_batch_within,
        handle=handle,
    )
