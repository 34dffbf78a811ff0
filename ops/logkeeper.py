"""The embedded broker's log cleaner: retention and compaction of tansu's batch objects.

Why: tansu 0.6.0 on S3 storage writes one object per produce request,
lists every object of a partition on each fetch that has data to return
(ListObjectsV2 without a start key, then a GET per batch from the one
holding the fetch offset on), and never deletes anything. A partition
therefore gets slower with every request until a consumer at its tail
starves, and a forgotten user's words stay in clear on every topic.

So the store that serves tansu's objects also keeps them, as Kafka's log
cleaner keeps segments. Every `interval` seconds, for each partition:

- **Retention**: a batch whose newest record is older than the topic's
  retention is deleted; a rewritten batch whose oldest records are older is
  cut down to its unexpired tail (ops/kbatch.py). A record's age is its
  producer timestamp, capped by the time the broker stored it (the file's
  time), so a producer with a clock ahead cannot keep data forever.
  Retention comes from the topics file (`retention_ms`, -1 = forever), else
  from the topic's own `retention.ms`; a topic with neither, or with
  `cleanup.policy=compact` only (Faust changelogs), keeps everything.
- **Compaction**: a run of adjacent small batches older than `settle`, one
  producer's with contiguous sequences, becomes one batch of up to
  `target_bytes` stored at the run's first offset; the rest leave the
  listing. Offsets, timestamps, keys, values, headers, producer id, epoch
  and sequences are kept; the file keeps the newest member's time, which is
  what tansu's ListOffsets compares.

A rewrite must not meet a fetch halfway (listed before, read after: the
fetch would read a record twice, or skip one). The `Gate` makes rewrites of
a partition wait until no fetch has touched it for `quiet` seconds and holds
new fetches' listings meanwhile; a batch rewritten away stays readable (not
listed) for `grace` seconds in case a slow fetch still asks for it. A crash
between the two steps of a rewrite leaves a batch whose records another
one also holds: the next round deletes the covered one.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ops import kbatch

log = logging.getLogger("memstream.logkeeper")

RECORDS = "/records/"
HOLD_LIMIT = 30.0  # a listing never waits longer for a rewrite (the keeper's holds are far shorter)
JOURNAL = ".keeper-journal.json"
GRAVEYARD = ".graveyard"
TEMP_PREFIX = ".localbucket-"  # what the store's listings skip


@dataclass(frozen=True, slots=True)
class KeeperConfig:
    interval: float = 5.0
    settle: float = 10.0  # younger batches are the tail consumers are reading: left alone
    target_bytes: int = 1 << 20
    min_run: int = 8  # a shorter run waits until its newest batch is `max_delay` old
    max_delay: float = 60.0
    quiet: float = 0.2
    max_wait: float = 2.0
    grace: float = 20.0
    scan_limit: int = 10_000  # batches read per partition per round (a backlog takes several rounds)
    hold_limit: int = 5_000  # batches rewritten away in one hold of a partition's listings


@dataclass(frozen=True, slots=True)
class Stored:
    """One batch object: its key's offset, file size, file time (ms) and header (None: not a readable batch)."""

    key: int
    size: int
    mtime_ms: int
    header: kbatch.Header | None

    @property
    def next_offset(self) -> int:
        return self.key + 1 if self.header is None else self.header.next_offset(self.key)


@dataclass(frozen=True, slots=True)
class Plan:
    delete: list[Stored] = field(default_factory=list)
    trim: Stored | None = None
    merges: list[list[Stored]] = field(default_factory=list)


def retention_of(meta: Mapping[str, object], declared: Mapping[str, int]) -> dict[str, int | None]:
    """Each topic's retention in ms (None: kept forever), from the topics file, else its own configs."""
    out: dict[str, int | None] = {}
    topics = meta.get("topics")
    for name, entry in (topics if isinstance(topics, dict) else {}).items():
        configs: dict[str, str] = {}
        topic = entry.get("topic") if isinstance(entry, dict) else None
        for config in (topic or {}).get("configs") or []:
            if isinstance(config, dict) and isinstance(config.get("name"), str):
                configs[config["name"]] = str(config.get("value"))
        policy = configs.get("cleanup.policy", "delete")
        retention = declared.get(name)
        if retention is None:
            try:
                retention = int(configs["retention.ms"])
            except (KeyError, ValueError):
                retention = None
        out[name] = retention if retention is not None and retention >= 0 and "delete" in policy else None
    return out


def expires_at(stored: Stored, retention_ms: int) -> int:
    """When the batch's newest record expires (ms)."""
    newest = (
        stored.mtime_ms
        if stored.header is None
        else min(_stamp(stored.header.max_timestamp, stored.mtime_ms), stored.mtime_ms)
    )
    return newest + retention_ms


def plan(batches: Sequence[Stored], now_ms: int, retention_ms: int | None, config: KeeperConfig) -> Plan:
    """What one round does to a partition's batches (in offset order): pure, so it is tested alone.

    The partition's last batch is never merged, and a run never ends later
    (file time) than the batch after it: tansu answers ListOffsets from file
    times (latest: the newest file's key + 1; earliest: the oldest file).
    """
    out = Plan()
    rest: list[Stored] = []
    covered_to = -1
    for stored in batches:
        if stored.next_offset <= covered_to:
            out.delete.append(stored)  # another batch holds all its records (a rewrite cut short)
            continue
        covered_to = max(covered_to, stored.next_offset)
        rest.append(stored)
    start = 0
    if retention_ms is not None:
        cutoff = now_ms - retention_ms
        while start < len(rest) and expires_at(rest[start], retention_ms) <= now_ms:
            out.delete.append(rest[start])
            start += 1
        head = rest[start] if start < len(rest) else None
        if (
            head is not None
            and head.header is not None
            and head.header.rewritable
            and head.header.record_count > 1
            and min(_stamp(head.header.base_timestamp, head.mtime_ms), head.mtime_ms) < cutoff
        ):
            out = Plan(out.delete, head, [])
            start += 1
    settled = now_ms - int(config.settle * 1000)
    run: list[Stored] = []
    size = 0

    def close(after: Stored | None) -> None:
        newest = max((s.mtime_ms for s in run), default=0)
        if len(run) < 2 or (after is not None and newest > after.mtime_ms):
            return
        if len(run) >= config.min_run or newest <= now_ms - config.max_delay * 1000:
            out.merges.append(list(run))

    candidates = rest[start:-1]  # never the last batch
    for stored in candidates:
        if stored.mtime_ms > settled:
            close(stored)
            return out
        header, before = stored.header, run[-1] if run else None
        joins = (
            before is not None
            and header is not None
            and before.header is not None
            and size + stored.size <= config.target_bytes
            and header.follows(stored.key, before.header, before.key)
        )
        if not joins:
            close(stored)
            run, size = [], 0
            if header is None or not header.rewritable or stored.size >= config.target_bytes:
                continue
        run.append(stored)
        size += stored.size
    close(rest[-1] if rest else None)
    return out


def _stamp(timestamp: int, mtime_ms: int) -> int:
    """A record's time: its producer timestamp, or the file's when it has none (-1)."""
    return mtime_ms if timestamp < 0 else timestamp


def expired_records(key: int, data: bytes, mtime_ms: int, cutoff_ms: int) -> int:
    """How many records at the head of the batch are older than `cutoff_ms`."""
    count = 0
    for record in kbatch.records(key, data):
        if min(_stamp(record.timestamp, mtime_ms), mtime_ms) >= cutoff_ms:
            break
        count += 1
    return count


class Gate:
    """Fetch activity per partition, and a hold on new listings while a partition is rewritten.

    tansu lists a partition, then reads batches from what it listed; a
    rewrite is safe once no request of the partition is in flight, none
    ended within `quiet` seconds (the gap between a fetch's listing and its
    reads), and no new listing can start. What the store cannot see is a
    tansu pause longer than `quiet` between a listing and its reads (docs/operations/embedded-broker.md).
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._touched: dict[str, float] = {}
        self._busy: dict[str, int] = {}
        self._held: set[str] = set()

    @contextlib.contextmanager
    def request(self, partition: str, *, first_page: bool = False) -> Iterator[None]:
        """A listing page or read of `partition` in flight; a first page waits while the partition is rewritten."""
        with self._cond:
            if first_page:
                self._cond.wait_for(lambda: partition not in self._held, HOLD_LIMIT)
            self._busy[partition] = self._busy.get(partition, 0) + 1
        try:
            yield
        finally:
            with self._cond:
                self._busy[partition] -= 1
                self._touched[partition] = time.monotonic()

    @contextlib.contextmanager
    def held(self, partition: str, quiet: float, max_wait: float) -> Iterator[bool]:
        """Hold new listings of `partition`; True once it has been quiet for `quiet` s (False: gave up)."""
        with self._cond:
            self._held.add(partition)
        try:
            deadline = time.monotonic() + max_wait
            while True:
                with self._cond:
                    busy = self._busy.get(partition, 0)
                    idle = time.monotonic() - self._touched.get(partition, 0.0)
                if not busy and idle >= quiet:
                    yield True
                    return
                if time.monotonic() >= deadline:
                    yield False
                    return
                time.sleep(max(quiet - idle, 0.01))
        finally:
            with self._cond:
                self._held.discard(partition)
                self._cond.notify_all()


class Graveyard:
    """Batches rewritten away: not listed, still readable for a grace period, then deleted."""

    def __init__(self, root: Path) -> None:
        self.dir = root / GRAVEYARD
        shutil.rmtree(self.dir, ignore_errors=True)  # nothing reads them across a restart
        self.dir.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._graves: dict[str, tuple[Path, float]] = {}
        self._n = 0

    def bury(self, path: Path, key: str, grace: float) -> None:
        with self._lock:
            self._n += 1
            grave = self.dir / f"{self._n}"
            os.replace(path, grave)
            self._graves[key] = (grave, time.monotonic() + grace)

    def find(self, key: str) -> Path | None:
        with self._lock:
            found = self._graves.get(key)
        return found[0] if found else None

    def sweep(self) -> int:
        now = time.monotonic()
        with self._lock:
            due = [(k, p) for k, (p, until) in self._graves.items() if until <= now]
            for k, _ in due:
                del self._graves[k]
        for _, path in due:
            path.unlink(missing_ok=True)
        return len(due)


def partition_of(key: str) -> str | None:
    """The records folder (bucket-relative, ending in /records/) a key or listing prefix belongs to."""
    at = key.find(RECORDS)
    return key[: at + len(RECORDS)] if at >= 0 and "/partitions/" in key else None


@dataclass
class Store:
    """What the keeper needs of the store: its bucket folder, its listing view and the locks it writes under."""

    bucket_dir: Path
    names: Callable[[str], list[str]]  # a folder's sorted entries
    added: Callable[[Path, str], None]  # a file written (path, listing entry)
    removed: Callable[[Path], None]
    key_lock: Callable[[Path], contextlib.AbstractContextManager[None]]
    describe: Callable[[int, float, str], str]  # size, mtime, etag -> listing entry


@dataclass(frozen=True, slots=True)
class Cut:
    """A batch cut down to its unexpired records, written aside as `temp` (None: nothing left) for `key`."""

    replaced: Stored
    key: int
    temp: Path | None


@dataclass
class Counters:
    merged: int = 0
    merges: int = 0
    deleted: int = 0
    trimmed: int = 0
    deferred: int = 0

    def as_dict(self) -> dict[str, int]:
        return dict(vars(self))


class Keeper:
    """One thread applying `plan` to every partition of the bucket, round after round."""

    def __init__(
        self, store: Store, gate: Gate, graves: Graveyard, config: KeeperConfig, declared: Mapping[str, int]
    ) -> None:
        self.store, self.gate, self.graves, self.config = store, gate, graves, config
        self.declared = dict(declared)
        self.counters = Counters()
        self._stop = threading.Event()

    def start(self) -> threading.Thread:
        thread = threading.Thread(target=self._run, name="logkeeper", daemon=True)
        thread.start()
        return thread

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            more = False
            try:
                more = self.round()
            except Exception:  # a bad round must not end the keeper; the next one retries
                log.exception("log keeper round failed")
            self.graves.sweep()
            if not more:
                self._stop.wait(self.config.interval)

    def round(self, now_ms: int | None = None) -> bool:
        """One pass over every partition; True when one made progress and has more than a round reads."""
        more = False
        clusters = self.store.bucket_dir / "clusters"
        for cluster in _subdirs(clusters):
            retention = self._retention(cluster)
            for topic in _subdirs(cluster / "topics"):
                for partition in _subdirs(topic / "partitions"):
                    rel = f"{partition.relative_to(self.store.bucket_dir).as_posix()}/records/"
                    try:
                        more |= self.keep(rel, retention.get(topic.name), now_ms)
                    except Exception:  # one partition's trouble must not stop the others' retention
                        log.exception("log keeper: partition %s failed this round", rel)
        return more

    def _retention(self, cluster: Path) -> dict[str, int | None]:
        try:
            meta = json.loads((cluster / "meta.json").read_bytes())
        except (OSError, ValueError):
            return {}
        return retention_of(meta if isinstance(meta, dict) else {}, self.declared)

    def keep(self, rel: str, retention_ms: int | None, now_ms: int | None = None) -> bool:
        """Retention and compaction of one partition's records folder (`rel`, bucket-relative).

        True when it did something and work is left over (more batches than a
        round reads, or than one hold of the partition rewrites).
        """
        folder = self.store.bucket_dir / rel
        names = [n for n in self.store.names(str(folder)) if n.endswith(".batch")]
        batches = [s for s in (self._stored(folder, n) for n in names[: self.config.scan_limit]) if s is not None]
        now = int(time.time() * 1000) if now_ms is None else now_ms
        todo = plan(batches, now, retention_ms, self.config)
        deletes, merges = todo.delete[: self.config.hold_limit], _capped(todo.merges, self.config.hold_limit)
        left_over = len(names) > self.config.scan_limit or deletes != todo.delete or merges != todo.merges
        if not (deletes or todo.trim or merges):
            return False
        prepared: list[tuple[list[Stored], Path]] = []
        cut: Cut | None = None
        try:
            cut = self._trimmed(folder, todo.trim, now - (retention_ms or 0)) if todo.trim else None
            for run in merges:
                prepared.append((run, self._merged(folder, run)))
        except FileNotFoundError:  # the topic was deleted meanwhile
            _unlink([t for _, t in prepared] + ([cut.temp] if cut is not None and cut.temp else []))
            return False
        except (ValueError, OverflowError) as exc:  # BadBatch among them: rewrite nothing, retention goes on
            log.warning("log keeper: partition %s not rewritten: %s", rel, exc)
            _unlink([t for _, t in prepared] + ([cut.temp] if cut is not None and cut.temp else []))
            prepared, cut = [], None
        temps = [temp for _, temp in prepared] + ([cut.temp] if cut and cut.temp else [])
        with self.gate.held(rel, self.config.quiet, self.config.max_wait) as quiet:
            if not quiet:
                self.counters.deferred += 1
                _unlink(temps)
                return False
            self._journal(rel, [run for run, _ in prepared], cut)
            for stored in deletes:
                self._delete(folder, stored)
            if cut is not None and _unchanged(folder, [cut.replaced]):
                if cut.temp is not None:
                    self._install(cut.temp, folder / _name(cut.key))
                self._bury(folder, rel, cut.replaced.key)
                self.counters.trimmed += 1
            for run, temp in prepared:
                if _unchanged(folder, run):
                    self._replace_run(folder, rel, run, temp)
            _unlink(temps)  # those not installed: a member changed meanwhile
            self.journal.unlink(missing_ok=True)
        return left_over

    @property
    def journal(self) -> Path:
        return self.store.bucket_dir.parent / JOURNAL

    def _journal(self, rel: str, runs: list[list[Stored]], cut: Cut | None) -> None:
        """What the rewrite about to start replaces, so a restart after a crash in it can finish it (`recover`)."""
        entry = {
            "partition": rel,
            "runs": [[s.key for s in run] for run in runs],
            "trim": None if cut is None or cut.temp is None else [cut.replaced.key, cut.key],
        }
        temp = self.journal.with_name(self.journal.name + ".tmp")
        temp.write_text(json.dumps(entry))
        os.replace(temp, self.journal)

    def recover(self) -> int:
        """Before serving: finish a rewrite a crash cut short (the new batch in place, old ones still listed).

        Without this a fetch would read records twice until the next round
        found the covered batches. Returns how many batches it removed.
        """
        try:
            entry = json.loads(self.journal.read_text())
        except (OSError, ValueError):
            return 0
        folder, removed = self.store.bucket_dir / str(entry.get("partition", "")), 0
        covered: list[int] = []
        for run in entry.get("runs") or []:
            head = self._stored(folder, _name(run[0])) if run else None
            if head is not None and head.header is not None and head.next_offset > run[-1]:
                covered += run[1:]  # the merged batch was installed: its members go
        trim = entry.get("trim")
        if trim and (folder / _name(trim[1])).exists():
            covered.append(trim[0])
        for key in covered:
            path = folder / _name(key)
            if path.exists():
                path.unlink()
                removed += 1
        self.journal.unlink(missing_ok=True)
        return removed

    def _stored(self, folder: Path, name: str) -> Stored | None:
        """A batch file as the plan sees it; a file that is not exactly one v2 batch gets no header (never rewritten)."""
        path = folder / name
        try:
            with path.open("rb") as file:
                head = file.read(kbatch.HEADER_SIZE)
                stat = os.fstat(file.fileno())
            key = int(name[:20])
        except (FileNotFoundError, ValueError):
            return None
        header = kbatch.Header(*kbatch.HEADER.unpack(head)) if len(head) == kbatch.HEADER_SIZE else None
        if header is not None and (header.magic != 2 or header.batch_length + 12 != stat.st_size):
            header = None
        return Stored(key, stat.st_size, int(stat.st_mtime * 1000), header)

    def _write_temp(self, folder: Path, data: bytes, mtime_ms: int) -> Path:
        temp = folder / f"{TEMP_PREFIX}keeper-{os.getpid()}-{threading.get_ident()}-{time.monotonic_ns()}"
        temp.write_bytes(data)
        os.utime(temp, ns=(mtime_ms * 1_000_000, mtime_ms * 1_000_000))
        return temp

    def _merged(self, folder: Path, run: list[Stored]) -> Path:
        data = kbatch.merge([(s.key, (folder / _name(s.key)).read_bytes()) for s in run])
        return self._write_temp(folder, data, max(s.mtime_ms for s in run))

    def _trimmed(self, folder: Path, stored: Stored, cutoff_ms: int) -> Cut | None:
        data = (folder / _name(stored.key)).read_bytes()
        expired = expired_records(stored.key, data, stored.mtime_ms, cutoff_ms)
        if expired == 0:
            return None
        kept = kbatch.trim(stored.key, data, expired)
        if kept is None:
            return Cut(stored, stored.key, None)
        return Cut(stored, kept[0], self._write_temp(folder, kept[1], stored.mtime_ms))

    def _install(self, temp: Path, target: Path) -> None:
        with self.store.key_lock(target):
            data = temp.read_bytes()
            stat = temp.stat()
            os.replace(temp, target)
            etag = hashlib.md5(data, usedforsecurity=False).hexdigest()
            self.store.added(target, self.store.describe(stat.st_size, stat.st_mtime, etag))

    def _delete(self, folder: Path, stored: Stored) -> None:
        path = folder / _name(stored.key)
        with self.store.key_lock(path):
            path.unlink(missing_ok=True)
            self.store.removed(path)
        self.counters.deleted += 1

    def _bury(self, folder: Path, rel: str, key: int) -> None:
        path = folder / _name(key)
        with self.store.key_lock(path):
            with contextlib.suppress(FileNotFoundError):
                self.graves.bury(path, rel + _name(key), self.config.grace)
            self.store.removed(path)

    def _replace_run(self, folder: Path, rel: str, run: list[Stored], temp: Path) -> None:
        """The merged batch first, then the members it replaces leave: a crash between leaves a duplicate, never a gap."""
        self._install(temp, folder / _name(run[0].key))
        for stored in run[1:]:
            self._bury(folder, rel, stored.key)
        self.counters.merges += 1
        self.counters.merged += len(run)


def _capped(runs: list[list[Stored]], limit: int) -> list[list[Stored]]:
    """The first runs whose members, all told, stay within `limit` (at least one run)."""
    out: list[list[Stored]] = []
    total = 0
    for run in runs:
        if out and total + len(run) > limit:
            break
        out.append(run)
        total += len(run)
    return out


def _unchanged(folder: Path, batches: Sequence[Stored]) -> bool:
    """Every batch still the file the plan read (a topic deleted and made again meanwhile is not)."""
    for stored in batches:
        try:
            stat = (folder / _name(stored.key)).stat()
        except FileNotFoundError:
            return False
        if (stat.st_size, int(stat.st_mtime * 1000)) != (stored.size, stored.mtime_ms):
            return False
    return True


def _unlink(paths: Sequence[Path]) -> None:
    for path in paths:
        path.unlink(missing_ok=True)


def _name(key: int) -> str:
    return f"{key:020d}.batch"


def _subdirs(folder: Path) -> list[Path]:
    try:
        with os.scandir(folder) as found:
            return sorted(Path(e.path) for e in found if e.is_dir(follow_symlinks=False))
    except (FileNotFoundError, NotADirectoryError):
        return []
