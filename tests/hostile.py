"""Hostile `chat.turns` traffic, each message with the fate the contract gives it.

Why a generator of our own rather than hypothesis: a fault test needs one long,
reproducible stream (a seed) in which order matters (a conflicting duplicate
only conflicts after its original, a redelivery only after its first
delivery), and a verdict per message that an end-to-end test can check
against memory.dlq and the memory store.

Verdicts come from the product's own rules, asked at generation time:
`services.core.ingest.parse_chat_event` (with the stack's limits) says whether a
message is valid and why not, the archive's `turn_digest` says whether a
re-sent event id is the same turn or a conflict, and `candidates_for_turn`
says whether an accepted turn yields an exchange memory. When the contract
tightens or loosens, expectations follow; a hostile kind that turns out valid
simply becomes valid traffic (on a fresh user, so it never disturbs another
message's verdict).
"""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import orjson

from agents.rules.candidates import candidates_for_turn
from agents.window.agent import CONFLICT_REASON
from schemas import MemoryType, SessionEvent, TurnEvent, partition_key
from services.core.errors import InvalidEvent
from services.core.ingest import parse_chat_event
from services.stores.postgres.windows import turn_digest

REQUIRED = ("event_id", "tenant_id", "user_id", "session_id", "turn_index", "role", "content", "ts")
IDS = ("event_id", "tenant_id", "user_id", "session_id")
T = TypeVar("T")
_RAW = "__memstream_raw_literal__"

TOPICS = (
    "planning a trip to the Dolomites in late September",
    "my sourdough starter finally doubled overnight",
    "comparing heat pumps for an old stone house",
    "training for a half marathon with a bad knee",
    "learning Portuguese before the Lisbon conference",
    "the quarterly budget review slipped to Thursday",
    "repotting the fiddle leaf fig without killing it",
    "debugging a flaky integration test in the billing service",
    "the cat refuses the new grain-free food",
    "choosing between a used Volvo and an electric Kia",
    "my grandmother's recipe for plum dumplings",
    "setting up a home lab with three mini PCs",
)

ODD_TEXTS = (
    "我喜欢在周末去爬山，东京的秋天很美。",
    "東京に住んでいます。毎朝コーヒーを飲みます。",
    "저는 서울에서 일하고 있어요.",
    "🎉👩‍👩‍👧‍👦🏳️‍🌈 I love 🍕 and 🧗‍♀️ on Sundays 🇵🇹",
    "אני אוהב קפה שחור ☕ مرحبا بالعالم، أحب القهوة",
    "\u202eRTL override\u202c and \u2067isolate\u2069 marks",
    "cafe\u0301 na\u0131\u0308ve Å\u030a decomposed input",
    "ctrl\x01chars\x07are\x1b[31mstripped\x1f but\ttab\nnewline\rkept",
    "zero\u200bwidth\u200cjoin\u200dchars\ufeffhere",
    "𝓜𝓪𝓽𝓱 𝔞𝔩𝔭𝔥𝔞𝔫𝔲𝔪𝔢𝔯𝔦𝔠 ℌ𝔢𝔩𝔩𝔬",
    "Z̴̡̧͔͈a̸̢͓̩l̷̨̛͈g̶̢̛o̵̧͎ text stacked marks",
    "line\u2028separator and paragraph\u2029separator",
    "private use \ue000\uf8ff and noncharacters \ufdd0\ufffe\uffff \U0010ffff",
    "NUL\x00in content is stripped",
    "<script>alert(1)</script> '; DROP TABLE memories;-- ${jndi:ldap://x} {{7*7}}",
    "   leading and trailing whitespace   ",
)

ODD_IDS = (
    "sl/ash",
    "pct%25and%",
    "q?mark",
    "h#sh",
    "amp&eq=plus+",
    "back\\slash",
    "quote'dq\"",
    "..",
    ".",
    "../../etc/passwd",
    "用户名",
    "emoji😀🎉",
    "DROP_TABLE;--",
    "%00",
    "\u200bzero-width",
    "ÅNFC",
)


@dataclass(frozen=True)
class Contract:
    """The limits the stack under test runs with (its MEMSTREAM_* settings)."""

    max_content_bytes: int = 64 * 1024
    tenants: frozenset[str] | None = None


@dataclass
class Message:
    """One message to produce, and what the pipeline must make of it."""

    seq: int
    kind: str
    key: bytes | None
    value: bytes | None
    # The memory.dlq reason it must get; None when the window accepts it.
    reason: str | None
    event: TurnEvent | SessionEvent | None = None
    # A user turn seen for the first time: exactly one exchange memory with this text.
    exchange_text: str | None = None
    # The validator raised something other than InvalidEvent (a bug in the validator).
    validator_error: str | None = None

    @property
    def accepted(self) -> bool:
        return self.reason is None


@dataclass
class HostileTraffic:
    """A seeded stream of valid and hostile messages; `build()` fills `messages` in send order."""

    seed: int
    marker: str
    contract: Contract
    tenants: tuple[str, ...]
    messages: list[Message] = field(default_factory=list)
    rng: random.Random = field(init=False)
    _n: int = 0
    _digests: dict[tuple[str, str, str], str] = field(default_factory=dict)
    _accepted: list[tuple[dict[str, Any], TurnEvent]] = field(default_factory=list)

    # While the catalogue runs a kind, every pick() takes option number `_forced` (modulo its length).
    _forced: int | None = None
    _widest: int = 0

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)

    def pick(self, options: Sequence[T]) -> T:
        """A random option, or in the catalogue the next one, so every listed variant is sent in every run."""
        self._widest = max(self._widest, len(options))
        if self._forced is None:
            return self.rng.choice(options)
        return options[self._forced % len(options)]

    # --- building blocks --------------------------------------------------------------

    def _next(self) -> int:
        self._n += 1
        return self._n

    def turn(self, **over: Any) -> dict[str, Any]:
        """A valid user turn for a fresh user, unique content, marked with the run marker."""
        n = self._next()
        when = datetime.now(UTC) - timedelta(minutes=self.rng.randrange(0, 60 * 24 * 30))
        data: dict[str, Any] = {
            "event_id": f"{self.marker}-e{n}",
            "tenant_id": self.rng.choice(self.tenants),
            "user_id": f"fz-{self.marker}-u{n}",
            "session_id": f"s{n}",
            "turn_index": self.rng.randrange(0, 50),
            "role": "user",
            "content": f"Fuzz {self.marker} note {n}: {self.rng.choice(TOPICS)}.",
            "ts": when.isoformat(),
            "metadata": {"fuzz": self.marker, "n": n},
        }
        data.update(over)
        return data

    @staticmethod
    def dumps_with(data: dict[str, Any], path: tuple[str, ...], literal: bytes) -> bytes:
        """Serialize `data` with the value at `path` replaced by raw JSON text (NaN, 2**64, a lone \\ud800...)."""
        copy = json.loads(json.dumps(data))
        target = copy
        for part in path[:-1]:
            target = target[part]
        target[path[-1]] = _RAW
        return orjson.dumps(copy).replace(orjson.dumps(_RAW), literal, 1)

    def _garbage_key(self, data: dict[str, Any] | None) -> bytes | None:
        """Keys a careless producer sends: missing, binary, huge, or a real user's (to share its partition)."""
        choice = self.rng.random()
        if choice < 0.1:
            return None
        if choice < 0.15:
            return self.rng.randbytes(self.rng.randrange(1, 64))
        if choice < 0.17:
            return b"k" * 5000
        if choice < 0.4 and self._accepted:
            turn = self.rng.choice(self._accepted)[1]
            return turn.key
        if data is not None and isinstance(data.get("tenant_id"), str) and isinstance(data.get("user_id"), str):
            return partition_key(data["tenant_id"], data["user_id"])
        return f"fuzz:{self.marker}".encode()

    def judge(self, kind: str, key: bytes | None, value: bytes | None) -> Message:
        """Append the message with the verdict the product's own rules give it."""
        seq = len(self.messages)
        try:
            event = parse_chat_event(
                value, max_content_bytes=self.contract.max_content_bytes, tenants=self.contract.tenants
            )
        except InvalidEvent as exc:
            message = Message(seq, kind, key, value, exc.reason)
        except Exception as exc:  # the verdict is "the validator is broken"
            message = Message(seq, kind, key, value, None, validator_error=f"{type(exc).__name__}: {exc}"[:500])
        else:
            message = Message(seq, kind, key, value, None, event)
            if isinstance(event, TurnEvent):
                ident = (event.tenant_id, event.user_id, event.event_id)
                digest = turn_digest(event)
                known = self._digests.get(ident)
                if known is None:  # first delivery
                    self._digests[ident] = digest
                    exchanges = [c for c in candidates_for_turn(event) if c.type is MemoryType.EXCHANGE]
                    message.exchange_text = exchanges[0].text if exchanges else None
                    # Re-sends must share the original's partition to come after it: only then reuse it.
                    if value is not None and key == event.key:
                        self._accepted.append((orjson.loads(value), event))
                elif known != digest:
                    message.reason = CONFLICT_REASON
        self.messages.append(message)
        return message

    def emit(self, kind: str, data: dict[str, Any], value: bytes) -> Message:
        """A valid-looking message keyed like a well-behaved producer: tenant:user."""
        return self.judge(kind, partition_key(data["tenant_id"], data["user_id"]), value)

    # --- valid traffic (fresh users) ----------------------------------------------------

    def valid_plain(self) -> Message:
        data = self.turn()
        return self.emit("valid_plain", data, orjson.dumps(data))

    def valid_odd_content(self) -> Message:
        data = self.turn()
        data["content"] = f"{data['content']} {self.pick(ODD_TEXTS)}"
        return self.emit("valid_odd_content", data, orjson.dumps(data))

    def valid_content_at_limit(self) -> Message:
        """Exactly max_content_bytes after normalisation, in 1- to 4-byte characters."""
        data = self.turn()
        head = data["content"] + " "
        filler = self.pick(("a", "é", "€", "😀"))
        room = self.contract.max_content_bytes - len(head.encode())
        width = len(filler.encode())
        data["content"] = head + filler * (room // width) + "b" * (room % width)
        return self.emit("valid_content_at_limit", data, orjson.dumps(data))

    def valid_odd_ids(self) -> Message:
        """Legal ids that are awkward elsewhere: URL-reserved characters, dot segments, non-ASCII, 200 characters."""
        data = self.turn()
        name, odd = self.pick([(f, o) for f in ("user_id", "session_id", "event_id") for o in (*ODD_IDS, "long")])
        tail = f"-{self.marker}-{self._n}"
        if odd == "long":
            data[name] = "ü" * (200 - len(tail)) + tail  # 200 characters, about 400 bytes
        elif name == "user_id" and odd in (".", ".."):
            data[name] = odd + self.marker + str(self._n) if self._forced is None else odd  # the bare dot segment
        else:
            data[name] = odd + tail
        return self.emit(f"valid_odd_{name}", data, orjson.dumps(data))

    def valid_odd_ts(self) -> Message:
        data = self.turn()
        data["ts"] = self.pick(
            (
                "2026-11-21t10:00:00z",
                "2026-11-21T10:00:00+14:00",
                "2026-11-21T10:00:00-12:00",
                "2026-11-21T10:00:00.123456789Z",
                "1970-01-01T00:00:00Z",
                "1970-01-01T00:00:00-00:01",
                "2199-12-31T23:59:59.999999Z",
                "2199-12-31T23:59:59+00:01",
                "2028-02-29T12:00:00Z",
                "2000-02-29T23:59:59.5+05:30",
            )
        )
        return self.emit("valid_odd_ts", data, orjson.dumps(data))

    def valid_odd_metadata(self) -> Message:
        data = self.turn()
        nested: Any = {"leaf": True}
        for _ in range(6):  # with the metadata object and "deep": 8 levels
            nested = {"d": nested}
        data["metadata"] = self.pick(
            (
                {"deep": nested},
                {"blob": "x" * (15 * 1024)},
                {"ключ": "значение", "": "empty key", "a.b": 1, "$where": "1==1"},
                {"arr": list(range(256)), "big": 2**63 - 1, "small": -(2**63), "tiny": 1e-300, "nz": -0.0},
                {"nul_escaped_text": "tab\there", "null": None, "bools": [True, False]},
                {},
            )
        )
        return self.emit("valid_odd_metadata", data, orjson.dumps(data))

    def valid_odd_json(self) -> Message:
        data = self.turn()
        style = self.pick(range(5))
        if style == 0:  # duplicate keys: the last one wins
            value = orjson.dumps(data)[:-1] + b',"role":"user"}'
        elif style == 1:
            value = json.dumps(data, indent=2, ensure_ascii=True).encode()
        elif style == 2:
            items = list(data.items())
            self.rng.shuffle(items)
            value = orjson.dumps(dict(items))
        elif style == 3:
            value = orjson.dumps({**data, "type": "turn", "schema_version": 1})
        else:
            del data["metadata"]
            value = orjson.dumps(data)
        return self.emit(f"valid_odd_json_{style}", data, value)

    def valid_odd_key(self) -> Message:
        """A valid turn under a key that is not its tenant:user: the value decides, not the key."""
        data = self.turn()
        key = self.pick((None, b"", b"\x00\xff\xfe", b"k" * 5000, f"{self.marker}:someone-else".encode()))
        return self.judge("valid_odd_key", key, orjson.dumps(data))

    def valid_no_exchange(self) -> Message:
        """Accepted, but no exchange memory: not a user turn, or nothing left after stripping."""
        data = self.turn()
        field_name, value = self.pick(
            [("role", r) for r in ("assistant", "system", "tool")]
            + [("content", c) for c in ("", "   ", "\x01\x02\x03", "\t\n\r", "\x00")]
        )
        data[field_name] = value
        return self.emit("valid_no_exchange", data, orjson.dumps(data))

    def valid_session_end(self) -> Message:
        if self._accepted and self.rng.random() < 0.7:
            _, turn = self.rng.choice(self._accepted)
            tenant, user, session = turn.tenant_id, turn.user_id, turn.session_id
        else:
            data = self.turn()
            tenant, user, session = data["tenant_id"], data["user_id"], data["session_id"]
        end = {
            "type": "session_end",
            "event_id": f"{self.marker}-end{self._next()}",
            "tenant_id": tenant,
            "user_id": user,
            "session_id": session,
            "ts": datetime.now(UTC).isoformat(),
        }
        return self.emit("valid_session_end", end, orjson.dumps(end))

    def big_session(self, turns: int = 12) -> list[Message]:
        """One session of near-limit turns: the window evicts every turn, chunks get split by size."""
        first = self.turn()
        out = []
        for i in range(turns):
            data = {**first, "event_id": f"{first['event_id']}-big{i}", "turn_index": i}
            data["content"] = f"Big {self.marker} {i}: {self.rng.choice(TOPICS)}. " + "lorem ipsum dolor " * 3500
            out.append(self.emit("valid_big_session", data, orjson.dumps(data)))
        return out

    # --- hostile traffic ----------------------------------------------------------------

    def _mutate(self, kind: str, mutate: Callable[[dict[str, Any]], bytes]) -> Message:
        data = self.turn()
        return self.hostile(kind, mutate(data), data)

    def hostile(self, kind: str, value: bytes | None, data: dict[str, Any] | None = None) -> Message:
        key = self._garbage_key(data)
        if key is None and value is None:
            key = f"fuzz:{self.marker}".encode()  # a tombstone needs a key
        return self.judge(kind, key, value)

    def bad_json(self) -> Message:
        m = self.marker.encode()
        snippets = (
            b'{"event_id": "' + m + b'", broken',
            b"{'event_id': '" + m + b"'}",
            b'{"event_id": "' + m + b'",}',
            b'{"event_id" "' + m + b'"}',
            b'{event_id: "' + m + b'"}',
            b'{"event_id": "' + m + b'", "turn_index": 01}',
            b'{"event_id": "' + m + b'", "turn_index": .5}',
            b'{"event_id": "' + m + b'", "turn_index": +1}',
            b'{"event_id": "' + m + b'", "turn_index": 0x10}',
            b'{"event_id": "' + m + b'", "x": [1,2,]}',
            b'{"event_id": "' + m + b'" /* comment */}',
            b'{"event_id": "' + m + b'"}}',
            b'\x00{"event_id": "' + m + b'"}',
        )
        return self.hostile("invalid_json_malformed", self.pick(snippets))

    def truncated(self) -> Message:
        def cut(data: dict[str, Any]) -> bytes:
            full = orjson.dumps(data)
            return full[: self.rng.randrange(1, len(full) - 1)]

        return self._mutate("invalid_json_truncated", cut)

    def trailing(self) -> Message:
        tail = self.pick((b" x", b"}", b"{}", b"\x00", b"\n{}", b","))
        return self._mutate("invalid_json_trailing", lambda d: orjson.dumps(d) + tail)

    def bom(self) -> Message:
        return self._mutate("invalid_json_bom", lambda d: b"\xef\xbb\xbf" + orjson.dumps(d))

    def nan(self) -> Message:
        literal, path = self.pick(
            [
                (lit, p)
                for lit in (b"NaN", b"Infinity", b"-Infinity", b"nan", b"1e999", b"-1e400")
                for p in (("metadata", "x"), ("turn_index",))
            ]
        )
        return self._mutate("invalid_json_nonfinite", lambda d: self.dumps_with(d, path, literal))

    def bad_utf8(self) -> Message:
        junk, target = self.pick(
            [
                (j, t)
                for j in (b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80", b"\xc0\xaf", b"\xe2\x82")
                for t in ("content", "user_id", "event_id")
            ]
        )
        return self._mutate(
            f"invalid_utf8_{target}", lambda d: self.dumps_with(d, (target,), b'"' + junk + self.marker.encode() + b'"')
        )

    def lone_surrogate(self) -> Message:
        escape, path = self.pick(
            [
                (e, p)
                for e in (b"\\ud800", b"\\udfff", b"\\udc00\\ud800", b"\\ud800x", b"\\uD83D")
                for p in (("content",), ("user_id",), ("event_id",), ("metadata", "s"), ("metadata", "key"))
            ]
        )

        def mutate(data: dict[str, Any]) -> bytes:
            if path == ("metadata", "key"):
                raw = orjson.dumps(data)
                return raw.replace(b'"fuzz":', b'"fuzz' + escape + b'":', 1)
            return self.dumps_with(data, path, b'"a' + escape + b'b"')

        return self._mutate(f"lone_surrogate_{path[-1]}", mutate)

    def deep_json(self) -> Message:
        depth, (opener, closer) = self.pick(
            [(d, b) for d in (300, 1100, 5000) for b in ((b"[", b"]"), (b'{"a":', b"}"))]
        )
        nested = opener * depth + b"1" + closer * depth
        return self._mutate(f"deep_metadata_{depth}", lambda d: self.dumps_with(d, ("metadata", "deep"), nested))

    def empty(self) -> Message:
        value = self.pick((b"", b" ", b"\n", b"\t \r\n", None))
        return self.hostile("empty_value", value)

    def garbage(self) -> Message:
        value = self.rng.randbytes(self.rng.randrange(1, 4096))
        return self.hostile("binary_garbage", value)

    def top_level(self) -> Message:
        data = self.turn()
        value = self.pick(
            (
                b"[]",
                orjson.dumps([data]),
                b"5",
                b"-1.5e3",
                b'"a string"',
                orjson.dumps(data["content"]),
                b"null",
                b"true",
                b"false",
                b"{}",
            )
        )
        return self.hostile("non_object_top_level", value, data)

    def missing(self) -> Message:
        name = self.pick(REQUIRED)

        def drop(data: dict[str, Any]) -> bytes:
            del data[name]
            return orjson.dumps(data)

        return self._mutate(f"missing_{name}", drop)

    def extra(self) -> Message:
        name = self.pick(("extra", "Event_ID", "content ", "__proto__", "turnIndex", "embedding", "id"))
        extra = self.pick((1, "x", None, {}))
        return self._mutate("extra_field", lambda d: orjson.dumps({**d, name: extra}))

    def wrong_type(self) -> Message:
        name, bad = self.pick(
            [(f, b) for f in (*REQUIRED, "metadata") for b in (None, 5, 5.5, True, [], {}, ["x"], {"x": 1})]
        )
        return self._mutate(f"wrong_type_{name}", lambda d: orjson.dumps({**d, name: bad}))

    def turn_index(self) -> Message:
        literal = self.pick(
            (
                b'"5"',
                b"true",
                b"false",
                b"5.0",
                b"2147483648",
                b"-1",
                b"9223372036854775808",
                b"18446744073709551616",
                b"1.5",
                b"null",
                b'"0x10"',
                b"1e10",
                b"-0.0",
                b"[]",
                b"1000000000000000000000000000000",
                b"4294967296",
            )
        )
        return self._mutate("turn_index", lambda d: self.dumps_with(d, ("turn_index",), literal))

    def bad_id(self) -> Message:
        m = self.marker
        values = (
            "",
            "a" * 201,
            "é" * 201,
            f"{m}:colon",
            f"{m} space",
            f"{m}\ttab",
            f"{m}\nnewline",
            f"{m}\x00nul",
            f"{m}\x1funit-separator",
            f"{m}\x7fdel",
            f"{m}\x85nel",
            f"{m}\xa0nbsp",
            f"{m}\u2028ls",
            f"{m}\u3000ideographic-space",
            f"{m}\ufeffbom",
            f"{m}e\u0301-not-nfc",
            f" {m}",
            f"{m} ",
        )
        name, value = self.pick([(f, v) for f in IDS for v in values])
        return self._mutate(f"bad_{name}", lambda d: orjson.dumps({**d, name: value}))

    def bad_ts(self) -> Message:
        value: Any = self.pick(
            (
                "0001-01-01T00:00:00Z",
                "9999-12-31T23:59:59Z",
                "9999-12-31T23:59:59-23:59",
                "0001-01-01T00:00:00+23:59",
                "1969-12-31T23:59:59Z",
                "2200-01-01T00:00:00Z",
                "2199-12-31T23:59:59-00:01",
                "1970-01-01T00:00:00+00:01",
                "2026-11-21T10:00:00",
                "2026-11-21",
                "2026-02-30T10:00:00Z",
                "2027-02-29T10:00:00Z",
                "2026-11-21T24:00:00Z",
                "2026-11-21T23:59:60Z",
                "2026-11-21T10:00:00+24:00",
                "2026-11-21T10:00:00+05",
                "2026-11-21 10:00:00Z",
                "2026-11-21T10:00:00Z\n",
                "２０２６-11-21T10:00:00Z",
                "",
                "now",
                "2026-W47-6T10:00:00Z",
                "2026-11-21T10:00:00.1234567891Z",
                "2026-11-21T10:00Z",
                1732183200,
                1732183200.5,
                None,
            )
        )
        return self._mutate("bad_ts", lambda d: orjson.dumps({**d, "ts": value}))

    def bad_metadata(self) -> Message:
        choice = self.pick(range(13))
        big = self.pick((b"9223372036854775808", b"-9223372036854775809"))
        huge_float = self.pick((1e19, -1e19, 1e308))
        not_object: Any = self.pick(([], "str", 5, None, [{"a": 1}]))

        def mutate(data: dict[str, Any]) -> bytes:
            if choice == 0:  # 300 levels: orjson writes at most 254, so spell it out
                return self.dumps_with(data, ("metadata",), b'{"d":' * 300 + b"1" + b"}" * 300)
            if choice == 1:
                nested: Any = 1
                for _ in range(9):  # one level over the limit: nine dicts deep
                    nested = {"d": nested}
                return orjson.dumps({**data, "metadata": nested})
            if choice == 2:
                return orjson.dumps({**data, "metadata": {"blob": "x" * 20_000}})
            if choice == 3:
                return orjson.dumps({**data, "metadata": {f"k{i}": i for i in range(65)}})
            if choice == 4:
                return orjson.dumps({**data, "metadata": {"arr": list(range(257))}})
            if choice == 5:
                return orjson.dumps({**data, "metadata": {"k" * 129: 1}})
            if choice == 6:
                return orjson.dumps({**data, "metadata": {"s": f"{self.marker}\x00nul"}})
            if choice == 7:
                return orjson.dumps({**data, "metadata": {"nul\x00key": 1}})
            if choice == 8:
                return self.dumps_with(data, ("metadata", "n"), big)
            if choice == 9:
                return orjson.dumps({**data, "metadata": {"f": huge_float}})
            if choice == 10:
                return orjson.dumps({**data, "metadata": not_object})
            if choice == 11:  # huge: over the envelope allowance too
                return orjson.dumps({**data, "metadata": {f"k{i}": "v" * 1500 for i in range(60)}})
            return orjson.dumps({**data, "metadata": {"a": [[[[[[[[[1]]]]]]]]]}})

        return self._mutate(f"bad_metadata_{choice}", mutate)

    def bad_role(self) -> Message:
        role = self.pick(("robot", "USER", "", " user", "user\x00", None, 1, ["user"], "assistant "))
        return self._mutate("bad_role", lambda d: orjson.dumps({**d, "role": role}))

    def bad_type(self) -> Message:
        kind = self.pick(("unknown", "session_END", "Turn", 5, None, "", "turn\x00", ["turn"], "session-end"))
        return self._mutate("bad_type", lambda d: orjson.dumps({**d, "type": kind}))

    def bad_schema_version(self) -> Message:
        version = self.pick((2, 0, "1", True, 1.0, None, -1))
        return self._mutate("bad_schema_version", lambda d: orjson.dumps({**d, "schema_version": version}))

    def session_end_with_turn_fields(self) -> Message:
        return self._mutate("session_end_with_content", lambda d: orjson.dumps({**d, "type": "session_end"}))

    def bad_session_end(self) -> Message:
        missing = self.pick((*IDS, "ts"))

        def mutate(data: dict[str, Any]) -> bytes:
            end = {k: data[k] for k in (*IDS, "ts")} | {"type": "session_end"}
            del end[missing]
            return orjson.dumps(end)

        return self._mutate("session_end_missing_field", mutate)

    def oversized_content(self) -> Message:
        limit = self.contract.max_content_bytes
        filler = self.pick(("a", "é", "€", "😀"))

        def mutate(data: dict[str, Any]) -> bytes:
            head = data["content"] + " "
            room = limit - len(head.encode()) + 1  # one byte too many
            width = len(filler.encode())
            data["content"] = head + filler * (room // width + (1 if room % width else 0))
            return orjson.dumps(data)

        return self._mutate(f"oversized_content_{len(filler.encode())}byte", mutate)

    def oversized_envelope(self) -> Message:
        def mutate(data: dict[str, Any]) -> bytes:
            # Escaped controls: 6 bytes each on the wire, stripped to nothing when stored.
            data["content"] = "\x01" * (self.contract.max_content_bytes // 4)
            return orjson.dumps(data)

        return self._mutate("oversized_envelope_escapes", mutate)

    def huge(self) -> Message:
        """About 1 MB: over the content limit and over the DLQ's copy limit (truncated copy, sha256 header)."""

        def mutate(data: dict[str, Any]) -> bytes:
            data["content"] = f"Huge {self.marker} " + "0123456789abcdef" * 62_000
            return orjson.dumps(data)

        return self._mutate("oversized_huge", mutate)

    def unknown_tenant(self) -> Message:
        def mutate(data: dict[str, Any]) -> bytes:
            data["tenant_id"] = f"nope-{self.marker}-{self._n}"
            return orjson.dumps(data)

        return self._mutate("unknown_tenant", mutate)

    def conflicting(self) -> Message:
        """A known event id (same tenant and user) with something else changed."""
        original, event = self.rng.choice(self._accepted)
        changed = dict(original)
        what = self.pick(("content", "role", "ts", "turn_index", "metadata", "session_id"))
        if what == "content":
            changed["content"] = f"{original['content']} (edited {self._next()})"
        elif what == "role":
            changed["role"] = "assistant" if original["role"] == "user" else "user"
        elif what == "ts":
            changed["ts"] = (event.ts + timedelta(seconds=1)).isoformat()
        elif what == "turn_index":
            changed["turn_index"] = event.turn_index + 1
        elif what == "metadata":
            changed["metadata"] = {"edited": self._next()}
        else:
            changed["session_id"] = f"{event.session_id}-other"
        return self.judge(f"conflicting_{what}", event.key, orjson.dumps(changed))

    def redelivery(self) -> Message:
        """The same turn again, byte for byte or written differently: accepted, changes nothing."""
        original, event = self.rng.choice(self._accepted)
        style = self.pick(range(3))
        if style == 0:
            value = orjson.dumps(original)
        elif style == 1:
            value = json.dumps(original, indent=1, ensure_ascii=True, sort_keys=True).encode()
        else:
            value = orjson.dumps({**original, "content": original["content"] + "\x01"})  # stripped: the same turn
        return self.judge(f"redelivery_{style}", event.key, value)

    # --- the stream ---------------------------------------------------------------------

    def hostile_kinds(self) -> list[tuple[Callable[[], Message], float]]:
        """Every hostile kind with its weight in the random part of the stream."""
        kinds: list[tuple[Callable[[], Message], float]] = [
            (self.bad_json, 2),
            (self.truncated, 2),
            (self.trailing, 1),
            (self.bom, 0.5),
            (self.nan, 1),
            (self.bad_utf8, 1),
            (self.lone_surrogate, 1.5),
            (self.deep_json, 0.5),
            (self.empty, 0.5),
            (self.garbage, 1),
            (self.top_level, 1),
            (self.missing, 2),
            (self.extra, 1),
            (self.wrong_type, 2),
            (self.turn_index, 2),
            (self.bad_id, 3),
            (self.bad_ts, 3),
            (self.bad_metadata, 3),
            (self.bad_role, 1),
            (self.bad_type, 1),
            (self.bad_schema_version, 0.5),
            (self.session_end_with_turn_fields, 0.5),
            (self.bad_session_end, 0.5),
            (self.oversized_content, 0.5),
            (self.oversized_envelope, 0.2),
            (self.conflicting, 2),
            (self.redelivery, 0.5),
        ]
        if self.contract.tenants is not None:
            kinds.append((self.unknown_tenant, 1))
        return kinds

    def valid_kinds(self) -> list[tuple[Callable[[], Message], float]]:
        """Every valid kind (each on a fresh user) with its weight in the random part of the stream."""
        return [
            (self.valid_plain, 6),
            (self.valid_odd_content, 3),
            (self.valid_content_at_limit, 0.3),
            (self.valid_odd_ids, 1.5),
            (self.valid_odd_ts, 1),
            (self.valid_odd_metadata, 1),
            (self.valid_odd_json, 1),
            (self.valid_no_exchange, 0.7),
            (self.valid_odd_key, 0.3),
            (self.valid_session_end, 0.5),
        ]

    def _needs_original(self, make: Callable[[], Message]) -> bool:
        return make in (self.conflicting, self.redelivery) and not self._accepted

    def build(self, invalid: int = 2000, valid: int = 400, huge: int = 4, big_sessions: int = 1) -> list[Message]:
        """At least `invalid` messages to dead-letter and `valid` fresh valid ones, interleaved.

        Every variant each kind lists (the catalogue) is sent in every run,
        whatever the seed, so a failure a variant provokes is not a matter of
        luck; random picks fill the rest. Huge values and a big session are
        placed at random.
        """
        valid_made = 0
        valid_kinds = {make for make, _ in self.valid_kinds()}
        catalogue = [(make, 0) for make, _ in [*self.valid_kinds(), *self.hostile_kinds()]]
        self.rng.shuffle(catalogue)
        catalogue.sort(key=lambda entry: entry[0] not in valid_kinds)  # some accepted turns first, for re-sends
        specials = ["huge"] * huge + ["big"] * big_sessions
        while catalogue or self.invalid_count < invalid or valid_made < valid:
            if specials and self.rng.random() < 0.01:
                self.huge() if specials.pop(self.rng.randrange(len(specials))) == "huge" else self.big_session()
                continue
            if catalogue and (self.rng.random() < 0.5 or (self.invalid_count >= invalid and valid_made >= valid)):
                make, index = catalogue.pop(0)
                if self._needs_original(make):
                    catalogue.append((make, index))
                    continue
                self._forced, self._widest = index, 0
                try:
                    make()
                finally:
                    self._forced = None
                if make in valid_kinds:
                    valid_made += 1
                if index + 1 < self._widest:  # more variants of this kind: later, somewhere in the stream
                    catalogue.insert(self.rng.randrange(len(catalogue) + 1), (make, index + 1))
                continue
            if valid_made < valid and (self.invalid_count >= invalid or self.rng.random() < valid / (valid + invalid)):
                pick = self.valid_kinds()
                valid_made += 1
            else:
                pick = [(k, w) for k, w in self.hostile_kinds() if not self._needs_original(k)]
            make = self.rng.choices([k for k, _ in pick], weights=[w for _, w in pick])[0]
            make()
        for special in specials:
            self.huge() if special == "huge" else self.big_session()
        return self.messages

    @property
    def invalid_count(self) -> int:
        return sum(1 for m in self.messages if not m.accepted)

    def by_reason(self) -> Counter[str]:
        return Counter(m.reason for m in self.messages if m.reason is not None)
