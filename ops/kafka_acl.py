"""What each Kafka role may ask of the broker, decided per request: pure logic for ops/kafka_gate.py.

A role is checked against the parsed request (api key, version, and the
topic and group names in the body), never against the broker's answer. The
decoder reads only the fields a decision needs, for the versions listed in
PARSED_MAX; the gate advertises no higher version of those APIs, and a
restricted role asking a version or an API the decoder does not know is
refused (fail closed), never forwarded.

Roles:
- producer: Produce to chat.turns (idempotent, never transactional), and the
  Metadata, ApiVersions and InitProducerId a producer needs.
- subscriber: read memory.changes: Fetch, ListOffsets and
  OffsetForLeaderEpoch on it; its own consumer groups (group id = the user
  name, or the user name followed by '.', '-' or '_' and more):
  FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
  OffsetCommit and OffsetFetch.
- worker: everything (the pipeline creates and deletes topics, writes every
  topic, reads every topic, runs groups); the gate then only authenticates.

Metadata is answered for every role and every topic (names and partition
layout are no one's data; topics.yaml publishes them), so a client learns
of a refusal from the request that would touch data, with the error its
library expects there; a producer's or subscriber's Metadata request is
forwarded with topic auto-creation off.

A refusal answers what a Kafka client expects where the layout is simple
enough to build for every version (Produce, Fetch: TOPIC_AUTHORIZATION_FAILED
on every partition of the request; FindCoordinator:
GROUP_AUTHORIZATION_FAILED; CreateTopics: TOPIC_AUTHORIZATION_FAILED per
topic), and closes the connection otherwise.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass, field

PRODUCER, SUBSCRIBER, WORKER = "producer", "subscriber", "worker"
ROLES = (PRODUCER, SUBSCRIBER, WORKER)
# A user stored before roles existed: the role memstream's own user needs, so nothing that worked stops.
DEFAULT_ROLE = WORKER

TURNS, CHANGES = "chat.turns", "memory.changes"
GROUP_SEPARATORS = ".-_"

PRODUCE, FETCH, LIST_OFFSETS, METADATA = 0, 1, 2, 3
OFFSET_COMMIT, OFFSET_FETCH, FIND_COORDINATOR = 8, 9, 10
JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP = 11, 12, 13, 14
SASL_HANDSHAKE, API_VERSIONS, CREATE_TOPICS = 17, 18, 19
INIT_PRODUCER_ID, OFFSET_FOR_LEADER_EPOCH = 22, 23

TOPIC_AUTHORIZATION_FAILED, GROUP_AUTHORIZATION_FAILED, UNSUPPORTED_VERSION = 29, 30, 35

# First flexible version (compact strings and arrays, tagged fields, request header v2) per API.
FLEXIBLE_FROM = {
    PRODUCE: 9,
    FETCH: 12,
    LIST_OFFSETS: 6,
    METADATA: 9,
    OFFSET_COMMIT: 8,
    OFFSET_FETCH: 6,
    FIND_COORDINATOR: 3,
    JOIN_GROUP: 6,
    HEARTBEAT: 4,
    LEAVE_GROUP: 4,
    SYNC_GROUP: 4,
    API_VERSIONS: 3,
    CREATE_TOPICS: 5,
    INIT_PRODUCER_ID: 2,
    OFFSET_FOR_LEADER_EPOCH: 4,
}
# The highest version of each API the decoder reads; the gate advertises no higher one.
# Fetch 13+ and Produce 13+ name topics by id, OffsetFetch 8+ batches groups: not parsed.
PARSED_MAX = {
    PRODUCE: 12,
    FETCH: 12,
    LIST_OFFSETS: 7,
    METADATA: 12,
    OFFSET_COMMIT: 8,
    OFFSET_FETCH: 7,
    FIND_COORDINATOR: 4,
    JOIN_GROUP: 9,
    HEARTBEAT: 4,
    LEAVE_GROUP: 5,
    SYNC_GROUP: 5,
    API_VERSIONS: 3,
    CREATE_TOPICS: 7,
    INIT_PRODUCER_ID: 5,
    OFFSET_FOR_LEADER_EPOCH: 4,
}


class Malformed(Exception):
    """The request cannot be read (truncated, or a length out of range): refuse it."""


class Reader:
    """Kafka primitive types off one request; `flexible` picks compact strings and arrays."""

    def __init__(self, data: bytes, flexible: bool = False) -> None:
        self.data = data
        self.pos = 0
        self.flexible = flexible

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise Malformed("truncated request")
        chunk = self.data[self.pos : self.pos + n]
        self.pos += n
        return chunk

    def int8(self) -> int:
        return self.take(1)[0]

    def int16(self) -> int:
        value: int = struct.unpack(">h", self.take(2))[0]
        return value

    def int32(self) -> int:
        value: int = struct.unpack(">i", self.take(4))[0]
        return value

    def uvarint(self) -> int:
        value = shift = 0
        while True:
            byte = self.take(1)[0]
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7
            if shift > 28:
                raise Malformed("varint too long")

    def _length(self) -> int:
        """A string, bytes or array length; -1 means null."""
        return self.uvarint() - 1 if self.flexible else self.int32()

    def nullable_string(self) -> str | None:
        n = self.uvarint() - 1 if self.flexible else self.int16()
        try:
            return None if n < 0 else self.take(n).decode()
        except UnicodeDecodeError as exc:
            raise Malformed("a name that is not UTF-8") from exc

    def string(self) -> str:
        value = self.nullable_string()
        if value is None:
            raise Malformed("a null name")
        return value

    def legacy_nullable_string(self) -> str | None:
        """The client id of every request header: never compact, even in a flexible request."""
        n = self.int16()
        return None if n < 0 else self.take(n).decode(errors="replace")

    def array(self) -> int:
        """The element count of an array; a null array counts 0."""
        n = self._length()
        if n > len(self.data) - self.pos:  # every element takes at least one byte
            raise Malformed("array longer than the request")
        return max(n, 0)

    def skip_bytes(self) -> None:
        self.take(max(self._length(), 0))

    def skip(self, n: int) -> None:
        self.take(n)

    def tags(self) -> None:
        if self.flexible:
            for _ in range(self.uvarint()):
                self.uvarint()
                self.take(self.uvarint())


@dataclass(frozen=True)
class Request:
    """What a decision needs of one request; `partitions` per topic in request order."""

    api_key: int
    version: int
    correlation_id: int
    topics: list[tuple[str, list[int]]] = field(default_factory=list)
    groups: list[str] = field(default_factory=list)
    transactional_id: str | None = None
    acks: int = -1
    coordinator_key_type: int = 0
    auto_create_at: int | None = None  # Metadata v4+: where allow_auto_topic_creation is in the frame


def parse_header(frame: bytes) -> tuple[int, int, int, Reader]:
    """(api key, version, correlation id, a reader at the start of the body)."""
    r = Reader(frame)
    api_key, version, correlation_id = r.int16(), r.int16(), r.int32()
    r.legacy_nullable_string()
    flexible = version >= FLEXIBLE_FROM.get(api_key, 1 << 15)
    if flexible:
        r.flexible = True
        r.tags()
    return api_key, version, correlation_id, r


def _partitions(r: Reader, each: Callable[[Reader], None]) -> list[int]:
    found = []
    for _ in range(r.array()):
        found.append(r.int32())
        each(r)
        r.tags()
    return found


def _topics(r: Reader, each: Callable[[Reader], None]) -> list[tuple[str, list[int]]]:
    found = []
    for _ in range(r.array()):
        name = r.string()
        found.append((name, _partitions(r, each)))
        r.tags()
    return found


def _produce(r: Reader, v: int, req: dict[str, object]) -> None:
    req["transactional_id"] = r.nullable_string() if v >= 3 else None
    req["acks"] = r.int16()
    r.int32()  # timeout
    req["topics"] = _topics(r, lambda p: p.skip_bytes())


def _fetch(r: Reader, v: int, req: dict[str, object]) -> None:
    r.skip(12 + (4 if v >= 3 else 0) + (1 if v >= 4 else 0) + (8 if v >= 7 else 0))
    per_partition = (4 if v >= 9 else 0) + 8 + (4 if v >= 12 else 0) + (8 if v >= 5 else 0) + 4
    topics = _topics(r, lambda p: p.skip(per_partition))
    if v >= 7:  # forgotten topics of an incremental fetch session
        for _ in range(r.array()):
            topics.append((r.string(), []))
            for _ in range(r.array()):
                r.int32()
            r.tags()
    req["topics"] = topics


def _list_offsets(r: Reader, v: int, req: dict[str, object]) -> None:
    r.skip(4 + (1 if v >= 2 else 0))
    per_partition = (4 if v >= 4 else 0) + 8 + (4 if v == 0 else 0)
    req["topics"] = _topics(r, lambda p: p.skip(per_partition))


def _metadata(r: Reader, v: int, req: dict[str, object]) -> None:
    topics: list[tuple[str, list[int]]] = []
    for _ in range(r.array()):
        if v >= 10:
            r.skip(16)  # topic id
        name = r.string() if v < 10 else r.nullable_string()
        topics.append((name or "", []))
        r.tags()
    req["topics"] = topics
    if v >= 4:
        req["auto_create_at"] = r.pos
        r.int8()


def _offset_commit(r: Reader, v: int, req: dict[str, object]) -> None:
    req["groups"] = [r.string()]
    if v >= 1:
        r.int32()
        r.string()
    if v >= 7:
        r.nullable_string()
    if 2 <= v <= 4:
        r.skip(8)
    per_partition = 8 + (4 if v >= 6 else 0) + (8 if v == 1 else 0)

    def partition(p: Reader) -> None:
        p.skip(per_partition)
        p.nullable_string()

    req["topics"] = _topics(r, partition)


def _offset_fetch(r: Reader, v: int, req: dict[str, object]) -> None:
    req["groups"] = [r.string()]
    topics = []
    for _ in range(r.array()):  # null (v2+): every topic of the group
        name = r.string()
        topics.append((name, [r.int32() for _ in range(r.array())]))
        r.tags()
    req["topics"] = topics


def _find_coordinator(r: Reader, v: int, req: dict[str, object]) -> None:
    if v <= 3:
        key = r.string()
        req["coordinator_key_type"] = r.int8() if v >= 1 else 0
        req["groups"] = [key]
        return
    req["coordinator_key_type"] = r.int8()
    req["groups"] = [r.string() for _ in range(r.array())]


def _group_first(r: Reader, v: int, req: dict[str, object]) -> None:
    req["groups"] = [r.string()]


def _transactional_first(r: Reader, v: int, req: dict[str, object]) -> None:
    req["transactional_id"] = r.nullable_string()


def _offset_for_leader_epoch(r: Reader, v: int, req: dict[str, object]) -> None:
    if v >= 3:
        r.int32()  # replica id
    per_partition = (4 if v >= 2 else 0) + 4
    req["topics"] = _topics(r, lambda p: p.skip(per_partition))


def _create_topics(r: Reader, v: int, req: dict[str, object]) -> None:
    req["topics"] = [(name, []) for name in _create_topic_names(r)]


def _create_topic_names(r: Reader) -> list[str]:
    names = []
    for _ in range(r.array()):
        names.append(r.string())
        r.int32()
        r.int16()
        for _ in range(r.array()):  # assignments
            r.int32()
            for _ in range(r.array()):
                r.int32()
            r.tags()
        for _ in range(r.array()):  # configs
            r.string()
            r.nullable_string()
            r.tags()
        r.tags()
    return names


_BODIES: dict[int, Callable[[Reader, int, dict[str, object]], None]] = {
    PRODUCE: _produce,
    FETCH: _fetch,
    LIST_OFFSETS: _list_offsets,
    METADATA: _metadata,
    OFFSET_COMMIT: _offset_commit,
    OFFSET_FETCH: _offset_fetch,
    FIND_COORDINATOR: _find_coordinator,
    JOIN_GROUP: _group_first,
    HEARTBEAT: _group_first,
    LEAVE_GROUP: _group_first,
    SYNC_GROUP: _group_first,
    INIT_PRODUCER_ID: _transactional_first,
    OFFSET_FOR_LEADER_EPOCH: _offset_for_leader_epoch,
    CREATE_TOPICS: _create_topics,
    API_VERSIONS: lambda r, v, req: None,
}


def parse_request(frame: bytes) -> Request:
    """The names one request touches; Malformed for an API or a version the decoder does not read."""
    api_key, version, correlation_id, r = parse_header(frame)
    body = _BODIES.get(api_key)
    if body is None or not 0 <= version <= PARSED_MAX[api_key]:
        raise Malformed(f"request {api_key} v{version} is not one the gate reads")
    found: dict[str, object] = {}
    body(r, version, found)
    return Request(api_key, version, correlation_id, **found)  # type: ignore[arg-type]


# --- the roles ---


def own_group(user: str, group: str) -> bool:
    """A subscriber's groups: its user name, alone or as a prefix followed by a separator."""
    return group == user or (group.startswith(user) and group[len(user) : len(user) + 1] in set(GROUP_SEPARATORS))


_PRODUCER_APIS = {API_VERSIONS, METADATA, PRODUCE, INIT_PRODUCER_ID}
_SUBSCRIBER_TOPIC_APIS = {FETCH, LIST_OFFSETS, OFFSET_FOR_LEADER_EPOCH, OFFSET_COMMIT, OFFSET_FETCH}
_GROUP_APIS = {FIND_COORDINATOR, JOIN_GROUP, SYNC_GROUP, HEARTBEAT, LEAVE_GROUP, OFFSET_COMMIT, OFFSET_FETCH}
_SUBSCRIBER_APIS = {API_VERSIONS, METADATA} | _SUBSCRIBER_TOPIC_APIS | _GROUP_APIS


@dataclass(frozen=True)
class Verdict:
    """forward: to the broker (`answered`: whether it will answer); else `reply` (bytes) or close (reason)."""

    forward: bool = False
    answered: bool = True
    reply: bytes | None = None
    close: str | None = None


def decide(role: str, user: str, req: Request) -> Verdict:
    """Whether `user` in `role` may send `req`, and what to answer when not."""
    if role == WORKER:
        return Verdict(forward=True)
    if req.api_key in (API_VERSIONS, METADATA):
        return Verdict(forward=True)
    what = f"{role} {user!r}: request {req.api_key} v{req.version}"
    if role == PRODUCER and req.api_key in _PRODUCER_APIS:
        if req.transactional_id is not None:
            return Verdict(close=f"{what} is transactional")
        if req.api_key == PRODUCE:
            if all(name == TURNS for name, _ in req.topics):
                return Verdict(forward=True, answered=req.acks != 0)
            return _topic_refusal(req)
        return Verdict(forward=True)
    if role == SUBSCRIBER and req.api_key in _SUBSCRIBER_APIS:
        if req.api_key in _GROUP_APIS:
            if req.api_key == FIND_COORDINATOR and req.coordinator_key_type != 0:
                return Verdict(close=f"{what} asks a transaction coordinator")
            if not all(own_group(user, g) for g in req.groups):
                if req.api_key == FIND_COORDINATOR:
                    return Verdict(reply=find_coordinator_refusal(req))
                return Verdict(close=f"{what} names a group not its own: {req.groups}")
        if req.api_key in _SUBSCRIBER_TOPIC_APIS and not all(name == CHANGES for name, _ in req.topics):
            if req.api_key == FETCH:
                return Verdict(reply=fetch_refusal(req))
            return Verdict(close=f"{what} names a topic other than {CHANGES}")
        return Verdict(forward=True)
    if req.api_key == CREATE_TOPICS:
        return Verdict(reply=create_topics_refusal(req))
    if req.api_key == PRODUCE:
        return _topic_refusal(req)
    if req.api_key == FETCH:
        return Verdict(reply=fetch_refusal(req))
    return Verdict(close=f"{what} is not allowed")


def without_auto_create(frame: bytes, req: Request) -> bytes:
    """The Metadata request with allow_auto_topic_creation off: only a worker may create topics, by any means."""
    at = req.auto_create_at
    if req.api_key != METADATA or at is None or frame[at] == 0:
        return frame
    return frame[:at] + b"\x00" + frame[at + 1 :]


def _topic_refusal(req: Request) -> Verdict:
    if req.acks == 0:  # the client expects no answer: drop the records
        return Verdict()
    return Verdict(reply=produce_refusal(req))


# --- the answers a client expects ---


class Writer:
    def __init__(self, flexible: bool) -> None:
        self.flexible = flexible
        self.out = bytearray()

    def raw(self, fmt: str, *values: int) -> Writer:
        self.out += struct.pack(">" + fmt, *values)
        return self

    def uvarint(self, value: int) -> Writer:
        while value >= 0x80:
            self.out.append((value & 0x7F) | 0x80)
            value >>= 7
        self.out.append(value)
        return self

    def length(self, n: int) -> Writer:
        """An array or bytes length (-1: null)."""
        return self.uvarint(n + 1) if self.flexible else self.raw("i", n)

    def string(self, value: str | None) -> Writer:
        if value is None:
            return self.uvarint(0) if self.flexible else self.raw("h", -1)
        raw = value.encode()
        (self.uvarint(len(raw) + 1) if self.flexible else self.raw("h", len(raw))).out += raw
        return self

    def tags(self) -> Writer:
        return self.uvarint(0) if self.flexible else self


def _response(req: Request) -> Writer:
    """The response header: correlation id, plus an empty tag section when flexible."""
    w = Writer(req.version >= FLEXIBLE_FROM[req.api_key])
    return w.raw("i", req.correlation_id).tags()


def produce_refusal(req: Request) -> bytes:
    """TOPIC_AUTHORIZATION_FAILED on every partition the Produce request names."""
    v = req.version
    w = _response(req).length(len(req.topics))
    for name, partitions in req.topics:
        w.string(name).length(len(partitions))
        for index in partitions:
            w.raw("ihq", index, TOPIC_AUTHORIZATION_FAILED, -1)
            if v >= 2:
                w.raw("q", -1)  # log append time
            if v >= 5:
                w.raw("q", -1)  # log start offset
            if v >= 8:
                w.length(0).string(None)  # record errors, error message
            w.tags()
        w.tags()
    if v >= 1:
        w.raw("i", 0)  # throttle time
    return bytes(w.tags().out)


def fetch_refusal(req: Request) -> bytes:
    """TOPIC_AUTHORIZATION_FAILED on every partition the Fetch request names (forgotten topics left out)."""
    v = req.version
    w = _response(req)
    if v >= 1:
        w.raw("i", 0)
    if v >= 7:
        w.raw("hi", 0, 0)  # error, session id
    named = [(name, parts) for name, parts in req.topics if parts]
    w.length(len(named))
    for name, partitions in named:
        w.string(name).length(len(partitions))
        for index in partitions:
            w.raw("ihq", index, TOPIC_AUTHORIZATION_FAILED, -1)
            if v >= 4:
                w.raw("q", -1)  # last stable offset
            if v >= 5:
                w.raw("q", -1)  # log start offset
            if v >= 4:
                w.length(0)  # aborted transactions
            if v >= 11:
                w.raw("i", -1)  # preferred read replica
            w.length(0).tags()  # records
        w.tags()
    return bytes(w.tags().out)


def find_coordinator_refusal(req: Request) -> bytes:
    """GROUP_AUTHORIZATION_FAILED for the group (v4+: for every key)."""
    v = req.version
    w = _response(req)
    if v >= 1:
        w.raw("i", 0)
    if v <= 3:
        w.raw("h", GROUP_AUTHORIZATION_FAILED)
        if v >= 1:
            w.string("group authorization failed")
        return bytes(w.raw("i", -1).string("").raw("i", -1).tags().out)
    w.length(len(req.groups))
    for key in req.groups:
        w.string(key).raw("i", -1).string("").raw("i", -1).raw("h", GROUP_AUTHORIZATION_FAILED)
        w.string("group authorization failed").tags()
    return bytes(w.tags().out)


def create_topics_refusal(req: Request) -> bytes:
    """TOPIC_AUTHORIZATION_FAILED per topic."""
    v = req.version
    w = _response(req)
    if v >= 2:
        w.raw("i", 0)
    w.length(len(req.topics))
    for name, _ in req.topics:
        w.string(name)
        if v >= 7:
            w.raw("qq", 0, 0)  # topic id (a null uuid)
        w.raw("h", TOPIC_AUTHORIZATION_FAILED)
        if v >= 1:
            w.string("topic authorization failed")
        if v >= 5:
            w.raw("ih", -1, -1).length(-1)  # partitions, replication factor, configs
        w.tags()
    return bytes(w.tags().out)


# --- ApiVersions, answered by the gate before and after authentication ---


def parse_api_versions(body: bytes) -> dict[int, tuple[int, int]]:
    """The broker's ApiVersions v0 answer (after the correlation id): {api key: (min, max)}."""
    r = Reader(body)
    error = r.int16()
    if error:
        raise Malformed(f"ApiVersions answered error {error}")
    found = {}
    for _ in range(r.array()):
        key, low, high = r.int16(), r.int16(), r.int16()
        found[key] = (low, high)
    return found


# Client telemetry (GetTelemetrySubscriptions, PushTelemetry): librdkafka asks on every connection when the broker
# lists it, and a producer's or subscriber's request the gate does not read closes the connection; nobody needs it.
UNADVERTISED = frozenset({71, 72})


def advertised(broker: dict[int, tuple[int, int]]) -> dict[int, tuple[int, int]]:
    """The broker's versions, capped where the gate reads the request; an API whose cap is below its minimum goes.

    Client telemetry is not listed (UNADVERTISED).
    """
    capped = {}
    for key, (low, high) in broker.items():
        if key in UNADVERTISED:
            continue
        high = min(high, PARSED_MAX.get(key, high))
        if high >= low:
            capped[key] = (low, high)
    return capped


def api_versions_response(correlation_id: int, version: int, apis: dict[int, tuple[int, int]]) -> bytes:
    """ApiVersions v0-v3 (header v0 always); a higher version gets UNSUPPORTED_VERSION in the v0 layout."""
    if version > PARSED_MAX[API_VERSIONS]:
        version, error = 0, UNSUPPORTED_VERSION
    else:
        error = 0
    w = Writer(version >= FLEXIBLE_FROM[API_VERSIONS]).raw("ih", correlation_id, error).length(len(apis))
    for key, (low, high) in sorted(apis.items()):
        w.raw("hhh", key, low, high).tags()
    if version >= 1:
        w.raw("i", 0)
    return bytes(w.tags().out)
