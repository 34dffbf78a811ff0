"""Batch rewriting (ops/kbatch.py) and the keeper's plan (ops/logkeeper.py), without a broker.

Batches are built by aiokafka's own batch builder, as a producer would,
and read back by aiokafka's reader, as a consumer would (CRC checked).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import time
from pathlib import Path

from aiokafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from hypothesis import given, settings
from hypothesis import strategies as st

from ops import kbatch
from ops.logkeeper import (
    Gate,
    Graveyard,
    Keeper,
    KeeperConfig,
    Store,
    Stored,
    expired_records,
    plan,
    retention_of,
)
from ops.s3listing import Listings

Rec = tuple[int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]

records_st = st.lists(
    st.tuples(
        st.integers(0, 10**6),
        st.none() | st.binary(max_size=20),
        st.none() | st.binary(max_size=200),
        st.lists(st.tuples(st.text(max_size=5), st.none() | st.binary(max_size=5)), max_size=2),
    ),
    min_size=1,
    max_size=6,
)


def produced(recs: list[Rec], producer: int = -1, sequence: int = -1, ts0: int = 1_700_000_000_000) -> bytes:
    builder = DefaultRecordBatchBuilder(2, 0, 0, producer, 0 if producer >= 0 else -1, sequence, 1 << 20)
    for i, (dt, key, value, headers) in enumerate(recs):
        builder.append(i, ts0 + dt, key, value, headers)
    return bytes(builder.build())


def consumed(key: int, data: bytes) -> list[tuple[int, int, bytes | None, bytes | None, list[tuple[str, bytes]]]]:
    batch = DefaultRecordBatch(data)
    assert batch.validate_crc()
    base = batch.base_offset
    return [(key + r.offset - base, r.timestamp, r.key, r.value, list(r.headers)) for r in batch]


@given(st.lists(records_st, min_size=1, max_size=5), st.booleans())
@settings(max_examples=60, deadline=None)
def test_a_merged_batch_holds_every_record_as_it_was(runs: list[list[Rec]], idempotent: bool) -> None:
    members, key, sequence = [], 100, 7
    for recs in runs:
        members.append((key, produced(recs, 42 if idempotent else -1, sequence if idempotent else -1)))
        key += len(recs)
        sequence += len(recs)
    merged = kbatch.merge(members)
    assert kbatch.crc_ok(merged)
    assert consumed(100, merged) == [r for k, data in members for r in consumed(k, data)]
    header = kbatch.Header.parse(merged)
    assert header.record_count == key - 100
    assert (header.producer_id, header.base_sequence) == ((42, 7) if idempotent else (-1, -1))


@given(records_st, st.integers(0, 8))
@settings(max_examples=60, deadline=None)
def test_a_trimmed_batch_keeps_the_unexpired_tail_at_its_offsets(recs: list[Rec], cut: int) -> None:
    data = produced(recs, 5, 30)
    trimmed = kbatch.trim(50, data, cut)
    if cut >= len(recs):
        assert trimmed is None
        return
    assert trimmed is not None
    key, out = trimmed
    assert key == 50 + cut
    assert consumed(key, out) == consumed(50, data)[cut:]
    assert kbatch.Header.parse(out).base_sequence == 30 + cut  # each record keeps its sequence number


def test_batches_that_cannot_share_a_batch_are_told_apart() -> None:
    a = kbatch.Header.parse(produced([(0, None, b"x", [])], 9, 0))
    same = kbatch.Header.parse(produced([(0, None, b"y", [])], 9, 1))
    gap = kbatch.Header.parse(produced([(0, None, b"y", [])], 9, 2))
    other = kbatch.Header.parse(produced([(0, None, b"y", [])], 8, 1))
    plain = kbatch.Header.parse(produced([(0, None, b"y", [])]))
    assert same.follows(11, a, 10)
    assert not same.follows(12, a, 10)  # an offset gap
    assert not gap.follows(11, a, 10)  # a sequence gap
    assert not other.follows(11, a, 10)  # another producer
    assert not plain.follows(11, a, 10)
    assert not dataclasses.replace(plain, attributes=1).rewritable  # gzip
    assert not dataclasses.replace(plain, attributes=kbatch.TRANSACTIONAL).rewritable


def test_batches_without_a_producer_id_join_whatever_sequence_their_client_wrote() -> None:
    """aiokafka, and so every Faust stage, writes base sequence 0 without a producer id: each produce request
    was one batch file that never merged, and a soak's listings grew by ~1,000 objects per partition in 14 min."""
    first = produced([(0, None, b"x", [])], -1, 0)
    second = produced([(5, None, b"y", [])], -1, 0)
    assert kbatch.Header.parse(second).follows(11, kbatch.Header.parse(first), 10)
    assert not kbatch.Header.parse(second).follows(12, kbatch.Header.parse(first), 10)  # an offset gap still splits
    idempotent = kbatch.Header.parse(produced([(0, None, b"y", [])], 9, 0))
    assert not idempotent.follows(11, kbatch.Header.parse(first), 10)  # nor does another producer
    merged = kbatch.merge([(10, first), (11, second)])
    assert consumed(10, merged) == consumed(10, first) + consumed(11, second)


def stored(
    key: int, count: int = 1, size: int = 100, age_s: float = 100, now: int = 10**9, ts: int | None = None
) -> Stored:
    mtime = now - int(age_s * 1000)
    first = mtime if ts is None else ts
    header = kbatch.Header(0, 49, 0, 2, 0, 0, count - 1, first, mtime, -1, -1, -1, count)
    return Stored(key, size, mtime, header)


def test_plan_merges_settled_runs_and_leaves_the_tail() -> None:
    now, config = 10**9, KeeperConfig(settle=10, min_run=3, target_bytes=1000)
    batches = [stored(i, now=now) for i in range(12)] + [stored(12 + i, age_s=1, now=now) for i in range(3)]
    todo = plan(batches, now, None, config)
    assert [[s.key for s in run] for run in todo.merges] == [list(range(10)), [10, 11]]
    assert not todo.delete


def test_plan_deletes_expired_batches_and_cuts_the_first_partly_expired_one() -> None:
    now = 10**9
    batches = [
        stored(0, 5, age_s=50, now=now),
        stored(5, 5, age_s=20, now=now, ts=now - 40_000),
        stored(10, age_s=5, now=now),
    ]
    todo = plan(batches, now, 30_000, KeeperConfig())
    assert [s.key for s in todo.delete] == [0]
    assert todo.trim is not None
    assert todo.trim.key == 5


def test_plan_deletes_a_batch_another_one_covers() -> None:
    now = 10**9
    todo = plan([stored(0, 10, now=now), stored(3, now=now), stored(10, now=now)], now, None, KeeperConfig())
    assert [s.key for s in todo.delete] == [3]


def test_expired_records_counts_the_head_older_than_the_cutoff() -> None:
    data = produced([(0, None, b"a", []), (10, None, b"b", []), (20, None, b"c", [])], ts0=1000)
    assert expired_records(0, data, 10**12, 1015) == 2
    assert expired_records(0, data, 1005, 1015) == 3  # the file's time caps a record's age


def test_retention_comes_from_the_topics_file_then_the_topic() -> None:
    def topic(*configs: tuple[str, str]) -> dict[str, object]:
        return {"topic": {"configs": [{"name": n, "value": v} for n, v in configs]}}

    meta = {
        "topics": {
            "declared": topic(("retention.ms", "5")),
            "own": topic(("retention.ms", "7")),
            "changelog": topic(("retention.ms", "7"), ("cleanup.policy", "compact")),
            "none": topic(),
            "forever": topic(("retention.ms", "9")),
        }
    }
    assert retention_of(meta, {"declared": 60_000, "forever": -1}) == {
        "declared": 60_000,
        "own": 7,
        "changelog": None,
        "none": None,
        "forever": None,
    }


def test_plan_never_merges_the_last_batch_nor_a_run_newer_than_the_batch_after_it() -> None:
    now, config = 10**9, KeeperConfig(settle=10, min_run=2)
    todo = plan([stored(i, now=now, age_s=100 - i) for i in range(5)], now, None, config)
    assert [[s.key for s in run] for run in todo.merges] == [[0, 1, 2, 3]]  # 4 is the last: tansu's "latest"
    # A batch written later than the one after it: merged, the file would look newer than its successor.
    out_of_order = [stored(0, now=now, age_s=50), stored(1, now=now, age_s=40), stored(2, now=now, age_s=45)]
    assert plan(out_of_order, now, None, config).merges == []


def test_a_batch_that_cannot_be_rewritten_leaves_the_partition_only_by_expiring_whole() -> None:
    now = 10**9
    head = stored(0, 5, age_s=20, now=now, ts=now - 40_000)
    gzip = dataclasses.replace(head, header=dataclasses.replace(head.header, attributes=1))
    todo = plan([gzip, stored(5, now=now)], now, 30_000, KeeperConfig())
    assert todo.trim is None
    assert todo.delete == []


def make_keeper(tmp_path: Path, config: KeeperConfig | None = None) -> tuple[Keeper, Path]:
    bucket = tmp_path / "tansu"
    bucket.mkdir(parents=True)
    listings = Listings(lambda path: "x")
    store = Store(
        bucket,
        names=lambda folder: listings.entries_from(folder, ""),
        added=lambda path, shown: listings.added(path, bucket, shown),
        removed=lambda path: listings.removed(path, bucket),
        key_lock=lambda path: contextlib.nullcontext(),
        describe=lambda size, mtime, etag: "x",
    )
    return Keeper(store, Gate(), Graveyard(tmp_path), config or KeeperConfig(), {}), bucket


def write_batches(folder: Path, batches: list[tuple[int, bytes]], at: float) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for key, data in batches:
        path = folder / f"{key:020d}.batch"
        path.write_bytes(data)
        os.utime(path, (at, at))


def test_recover_removes_the_batches_a_crash_left_beside_their_merged_batch(tmp_path: Path) -> None:
    keeper, bucket = make_keeper(tmp_path)
    folder = bucket / "clusters/c/topics/t/partitions/0000000000/records"
    members = [(k, produced([(0, None, f"m{k}".encode(), [])])) for k in range(3)]
    write_batches(folder, [(0, kbatch.merge(members)), *members[1:], (3, produced([(0, None, b"m3", [])]))], 1000)
    keeper.journal.write_text(
        json.dumps(
            {"partition": "clusters/c/topics/t/partitions/0000000000/records/", "runs": [[0, 1, 2]], "trim": None}
        )
    )
    assert keeper.recover() == 2
    assert sorted(os.listdir(folder)) == [f"{0:020d}.batch", f"{3:020d}.batch"]
    assert not keeper.journal.exists()


def test_one_partition_with_unreadable_batches_does_not_stop_the_others_retention(tmp_path: Path) -> None:
    keeper, bucket = make_keeper(tmp_path, KeeperConfig(quiet=0))
    keeper.declared = {"a": 1000, "b": 1000}
    (bucket / "clusters/c").mkdir(parents=True)
    (bucket / "clusters/c/meta.json").write_text(json.dumps({"topics": {"a": {}, "b": {}}}))
    old = time.time() - 3600
    bad = bucket / "clusters/c/topics/a/partitions/0000000000/records"
    write_batches(bad, [(0, b"not a batch at all" * 5), (1, produced([(0, None, b"x", [])], ts0=int(old * 1000)))], old)
    good = bucket / "clusters/c/topics/b/partitions/0000000000/records"
    write_batches(good, [(k, produced([(0, None, b"y", [])], ts0=int(old * 1000))) for k in range(3)], old)
    keeper.round()
    assert os.listdir(good) == []  # every record older than the retention
    assert os.listdir(bad) == []  # the unreadable one expires by its file time
