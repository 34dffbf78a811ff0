"""A generation's window input: memory.archive, opened with each user's data key.

The default generation's window reads `chat.turns` and seals what it accepts
into `memory.archive`; every other generation's window reads that archive
with a consumer group of its own. So a generation is built by the same
consumer that later keeps it current: it starts at the archive's beginning
(a rebuild), reaches the end, and from then on follows the records the
default's window appends (live ingest), for as long as its worker runs.

A record whose user has no key, or another key than the one it was sealed
with, belongs to a forgotten user: skipped and counted, never an error.
A record that does not open with its user's key (malformed, tampered with)
is bad input and goes to the DLQ like any other. Command records and
`forgotten` markers share the archive; they are the commands stage's input
(agents/consolidator/archived.py) and the window passes over them.
"""

from __future__ import annotations

from collections.abc import Sequence

from schemas import SessionEvent, TurnEvent
from services.archive import KeyStore
from services.archive.codec import EVENT_TYPES, ArchiveRecord, RecordRejected, open_record, read_record
from services.core import metrics
from services.core.errors import InvalidEvent

UNREADABLE = "archive_unreadable"


def parse_archived(raw: bytes | None) -> ArchiveRecord:
    """The record's clear fields; InvalidEvent when it is not an archive record at all."""
    try:
        return read_record(raw)
    except RecordRejected as exc:
        raise InvalidEvent(UNREADABLE, str(exc)) from None


async def open_archived(keys: KeyStore, records: Sequence[ArchiveRecord]) -> tuple[list[TurnEvent | SessionEvent], int]:
    """The events inside, in order, forgotten users' left out (and how many); one key query for the batch.

    Raises InvalidEvent for a record that does not open, so `deliver` retries
    the batch one record at a time and dead-letters that one alone. The caller
    counts the forgotten once its batch went through (a retried batch would
    count them twice).
    """
    records = [r for r in records if r.type in EVENT_TYPES]
    current = await keys.current({r.owner for r in records})
    events: list[TurnEvent | SessionEvent] = []
    forgotten = 0
    for record in records:
        key = current.get(record.owner)
        if key is None or key.key_id != record.key_id:
            forgotten += 1
            continue
        try:
            events.append(open_record(record, key))
        except RecordRejected as exc:
            raise InvalidEvent(UNREADABLE, str(exc)) from None
    return events, forgotten


def count_forgotten(n: int) -> None:
    if n:
        metrics.ARCHIVE_SKIPPED.labels(reason="forgotten").inc(n)
