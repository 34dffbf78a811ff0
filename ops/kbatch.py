"""Kafka record batches (magic v2) as tansu stores them: one batch per object, rewritten whole.

Why: tansu keeps every produce request as one object and lists all of a
partition's objects on each fetch, so a partition of many small batches
gets slower with every request (ops/logkeeper.py). Rewriting a run of
adjacent small batches as one batch keeps the listing short; cutting the
expired records off the head of a batch is how retention reaches into it.

A rewritten batch is what a broker could have written in the first place:
every record keeps its offset, timestamp, key, value and headers byte for
byte (only the two deltas in its header are re-based), the batch keeps the
producer id, epoch and base sequence of its first member (members must
come from one producer with contiguous sequences, or from no producer),
and its CRC-32C is computed anew. Compressed, transactional and control
batches, and log-append-time ones, are never rewritten.

Layout (61-byte header, then records): baseOffset i64, batchLength i32,
partitionLeaderEpoch i32, magic i8, crc u32, attributes i16,
lastOffsetDelta i32, baseTimestamp i64, maxTimestamp i64, producerId i64,
producerEpoch i16, baseSequence i32, recordCount i32. A record is a varint
length, then attributes i8, timestampDelta varlong, offsetDelta varint,
and the rest (key, value, headers), which is copied as it is.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from aiokafka.record.util import calc_crc32c

HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = HEADER.size  # 61
CRC_FROM = 21  # the CRC covers everything from the attributes on
COMPRESSION_MASK, LOG_APPEND_TIME, TRANSACTIONAL, CONTROL = 0x07, 0x08, 0x10, 0x20
NO_PRODUCER = -1


class BadBatch(ValueError):
    """The bytes are not one whole v2 record batch."""


@dataclass(frozen=True, slots=True)
class Header:
    base_offset: int
    batch_length: int
    leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @classmethod
    def parse(cls, data: bytes) -> Header:
        if len(data) < HEADER_SIZE:
            raise BadBatch(f"{len(data)} bytes is shorter than a batch header")
        header = cls(*HEADER.unpack_from(data))
        if header.magic != 2:
            raise BadBatch(f"magic {header.magic}, not 2")
        if header.batch_length + 12 > len(data) or header.batch_length + 12 < HEADER_SIZE:
            raise BadBatch(f"batch length {header.batch_length} does not fit {len(data)} bytes")
        return header

    @property
    def rewritable(self) -> bool:
        """Plain records: no compression, no transaction or control marker, producer timestamps."""
        return not self.attributes & (COMPRESSION_MASK | LOG_APPEND_TIME | TRANSACTIONAL | CONTROL)

    def next_offset(self, key: int) -> int:
        """The offset after this batch's last record, when the batch is stored at `key`."""
        return key + self.last_offset_delta + 1

    def follows(self, key: int, before: Header, before_key: int) -> bool:
        """Can this batch, stored at `key`, join one batch with `before` (stored at `before_key`) ahead of it?"""
        if not (self.rewritable and before.rewritable) or before.next_offset(before_key) != key:
            return False
        if (self.producer_id, self.producer_epoch) != (before.producer_id, before.producer_epoch):
            return False
        if self.producer_id == NO_PRODUCER:
            # Without a producer id no broker checks sequences, and clients write what they like: aiokafka
            # (so every Faust stage) writes 0 in every batch, the protocol says -1. Either joins.
            return True
        if self.base_sequence == -1 or before.base_sequence == -1:
            return self.base_sequence == before.base_sequence == -1
        return self.base_sequence == before.base_sequence + (key - before_key)


@dataclass(frozen=True, slots=True)
class Record:
    """One record at its absolute offset and timestamp; `rest` is its key, value and headers as stored."""

    offset: int
    timestamp: int
    attributes: int
    rest: bytes


def read_varint(data: bytes, pos: int) -> tuple[int, int]:
    """A zigzag varint at `pos`: (value, position after it)."""
    shift = raw = 0
    while True:
        if pos >= len(data):
            raise BadBatch("record ends inside a varint")
        byte = data[pos]
        pos += 1
        raw |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (raw >> 1) ^ -(raw & 1), pos
        shift += 7
        if shift > 63:
            raise BadBatch("varint too long")


def varint(value: int) -> bytes:
    raw = (value << 1) ^ (value >> 63)
    out = bytearray()
    while raw > 0x7F:
        out.append(0x80 | (raw & 0x7F))
        raw >>= 7
    out.append(raw)
    return bytes(out)


def records(key: int, data: bytes) -> Iterator[Record]:
    """The records of the batch in `data` stored at `key`, with absolute offsets and timestamps."""
    header = Header.parse(data)
    if header.attributes & COMPRESSION_MASK:
        raise BadBatch("compressed batches are not read here")
    pos, end = HEADER_SIZE, header.batch_length + 12
    for _ in range(header.record_count):
        length, pos = read_varint(data, pos)
        stop = pos + length
        if length < 3 or stop > end:
            raise BadBatch("record runs past its batch")
        attributes = data[pos]
        ts_delta, at = read_varint(data, pos + 1)
        offset_delta, at = read_varint(data, at)
        if at > stop:
            raise BadBatch("record header runs past the record")
        yield Record(key + offset_delta, header.base_timestamp + ts_delta, attributes, data[at:stop])
        pos = stop
    if pos != end:
        raise BadBatch("batch length disagrees with its records")


def build(template: Header, key: int, base_sequence: int, batch: Sequence[Record]) -> bytes:
    """One batch holding `batch` (in offset order), stored at `key`; producer fields from `template`."""
    if not batch:
        raise ValueError("a batch holds at least one record")
    base_ts = batch[0].timestamp
    body = bytearray()
    for record in batch:
        inner = (
            bytes((record.attributes,)) + varint(record.timestamp - base_ts) + varint(record.offset - key) + record.rest
        )
        body += varint(len(inner))
        body += inner
    after_crc = struct.pack(
        ">hiqqqhii",
        template.attributes,
        batch[-1].offset - key,
        base_ts,
        max(r.timestamp for r in batch),
        template.producer_id,
        template.producer_epoch,
        base_sequence,
        len(batch),
    )
    crc: int = calc_crc32c(after_crc + bytes(body))
    length = 4 + 1 + 4 + len(after_crc) + len(body)  # leader epoch, magic, crc, then the CRC'd part
    return struct.pack(">qiibI", key, length, template.leader_epoch, 2, crc) + after_crc + bytes(body)


def merge(members: Sequence[tuple[int, bytes]]) -> bytes:
    """Adjacent batches (key, bytes) of one producer, each following the one before, as one batch."""
    if not members:
        raise ValueError("nothing to merge")
    first_key, first = members[0][0], Header.parse(members[0][1])
    before_key, before = first_key, first
    out: list[Record] = []
    for key, data in members:
        header = Header.parse(data)
        if out and not header.follows(key, before, before_key):
            raise BadBatch(f"batch at {key} does not follow the one at {before_key}")
        if not header.rewritable:
            raise BadBatch(f"batch at {key} cannot be rewritten")
        out.extend(records(key, data))
        before_key, before = key, header
    return build(first, first_key, first.base_sequence, out)


def trim(key: int, data: bytes, expired: int) -> tuple[int, bytes] | None:
    """The batch without its first `expired` records: (new key, bytes), or None when nothing is left.

    The producer's base sequence moves with the offset, so every record
    keeps the sequence number it was written with.
    """
    header = Header.parse(data)
    if expired <= 0:
        return key, data
    if expired >= header.record_count:
        return None
    kept = list(records(key, data))[expired:]
    new_key = kept[0].offset
    sequence = header.base_sequence if header.base_sequence == -1 else header.base_sequence + (new_key - key)
    return new_key, build(header, new_key, sequence, kept)


def crc_ok(data: bytes) -> bool:
    header = Header.parse(data)
    computed: int = calc_crc32c(data[CRC_FROM : header.batch_length + 12])
    return computed == header.crc
