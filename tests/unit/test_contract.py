"""The `chat.turns` contract: validator and committed JSON Schema agree, and nothing hostile gets through.

One table of raw messages runs through both `parse_chat_event` and `jsonschema`
(Draft 2020-12, the committed `schemas/json/chat_event.schema.json`). They must
give the same verdict, except for the few rules JSON Schema cannot express;
those cases name the rule, and the rule must be declared in the schema under
`x-memstream-validator-only`.
"""

from __future__ import annotations

import json
import math
import re
import unicodedata
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta, timezone
from functools import cache
from typing import Any
from zoneinfo import ZoneInfo

import jsonschema
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from schemas import Role, SessionEvent, TurnEvent, chat_event_adapter
from schemas.generate import JSON_DIR
from schemas.validation import (
    ID_MAX_CHARS,
    METADATA_MAX_BYTES,
    METADATA_MAX_DEPTH,
    METADATA_MAX_ITEMS,
    METADATA_MAX_KEY_CHARS,
    METADATA_MAX_KEYS,
    NUMBER_MAX,
    NUMBER_MIN,
    TS_MAX,
    TS_MIN,
    TS_PATTERN,
    TURN_INDEX_MAX,
    VALIDATOR_ONLY,
)
from services.core.errors import InvalidEvent
from services.core.ingest import parse_chat_event

MAX_CONTENT_BYTES = 65536  # the default setting
DROP = object()  # a field left out

BASE: dict[str, Any] = {
    "event_id": "e1",
    "tenant_id": "acme",
    "user_id": "u1",
    "session_id": "s1",
    "turn_index": 0,
    "role": "user",
    "content": "hello",
    "ts": "2026-11-21T10:00:00Z",
    "metadata": {"channel": "web"},
}
SESSION_END = {k: BASE[k] for k in ("event_id", "tenant_id", "user_id", "session_id", "ts")} | {"type": "session_end"}


def doc(base: dict[str, Any] = BASE, **changes: Any) -> bytes:
    """Raw JSON as a producer would send it; json escapes lone surrogates as \\ud800 and writes NaN bare."""
    merged = {**base, **changes}
    return json.dumps({k: v for k, v in merged.items() if v is not DROP}).encode()


def nested(levels: int) -> dict[str, Any]:
    """An object whose containers nest `levels` deep, counting itself."""
    out: dict[str, Any] = {"leaf": 1}
    for _ in range(levels - 1):
        out = {"a": out}
    return out


@dataclass(frozen=True)
class Case:
    name: str
    raw: bytes
    valid: bool  # the validator's verdict
    validator_only: str | None = None  # the rule the schema cannot state; its verdict is the opposite


OK, BAD = True, False

CASES = [
    # well-formed
    Case("minimal turn", doc(), OK),
    Case("type omitted and metadata omitted", doc(metadata=DROP), OK),
    Case("explicit type turn", doc(type="turn"), OK),
    Case("session end", doc(SESSION_END), OK),
    Case("ids of 200 characters", doc(tenant_id="t" * 200, user_id="ü" * 200), OK),
    Case("non-ASCII NFC ids, astral included", doc(tenant_id="münchen", user_id="u😀"), OK),
    Case("turn_index at int32 max", doc(turn_index=TURN_INDEX_MAX), OK),
    Case("ts with offset, 9 fraction digits", doc(ts="2026-11-21T15:30:00.123456789+05:30"), OK),
    Case("ts lower-case t and z", doc(ts="2026-11-21t10:00:00z"), OK),
    Case("ts at the lower bound", doc(ts="1970-01-01T00:00:00Z"), OK),
    Case("ts at the upper bound", doc(ts="2199-12-31T23:59:59.999999Z"), OK),
    Case("ts leap day", doc(ts="2024-02-29T12:00:00Z"), OK),
    Case("ts negative offset keeps UTC in range", doc(ts="1970-01-01T00:30:00-01:00"), OK),
    Case("content NUL and C0 controls are stripped", doc(content="a\x00b\x01c\x1fd\te\nf\r"), OK),
    Case("content decomposed is normalised", doc(content="e\u0301"), OK),
    Case("content astral as escaped pair", doc(content="\U0001f600"), OK),
    Case("metadata 8 levels", doc(metadata=nested(METADATA_MAX_DEPTH)), OK),
    Case(
        "metadata at every per-container limit",
        doc(
            metadata={
                **{f"k{i}": i for i in range(METADATA_MAX_KEYS - 3)},
                "list": list(range(METADATA_MAX_ITEMS)),
                "k" * METADATA_MAX_KEY_CHARS: [NUMBER_MIN, NUMBER_MAX, 1.5, None, True, "x"],
                "c0 other than NUL": "a\x01b",
            }
        ),
        OK,
    ),
    # identifiers
    Case("id with the key separator", doc(tenant_id="a:b"), BAD),
    Case("id with a slash (a URL path segment)", doc(user_id="sl/ash"), BAD),
    Case("colliding tenant x\\x1fp", doc(tenant_id="x\x1fp", user_id="q"), BAD),
    Case("colliding user p\\x1fq", doc(tenant_id="x", user_id="p\x1fq"), BAD),
    Case("id with a space", doc(user_id="a b"), BAD),
    Case("id with NBSP", doc(user_id="a\u00a0b"), BAD),
    Case("id with U+2028", doc(session_id="a\u2028b"), BAD),
    Case("id with DEL", doc(event_id="a\x7fb"), BAD),
    Case("id with a C1 control", doc(event_id="a\x85b"), BAD),
    Case("id with BOM", doc(event_id="\ufeffa"), BAD),
    Case("id with NUL", doc(user_id="a\x00b"), BAD),
    Case("id with a lone surrogate", doc(user_id="a\ud800"), BAD),
    Case("id of 201 characters", doc(tenant_id="t" * (ID_MAX_CHARS + 1)), BAD),
    Case("empty id", doc(session_id=""), BAD),
    Case("numeric id", doc(user_id=5), BAD),
    Case("id not NFC", doc(user_id="e\u0301"), BAD, "id-nfc"),
    # turn_index
    Case("turn_index 2^31", doc(turn_index=2**31), BAD),
    Case("turn_index negative", doc(turn_index=-1), BAD),
    Case("turn_index as a string", doc(turn_index="5"), BAD),
    Case("turn_index true", doc(turn_index=True), BAD),
    Case("turn_index 5.0", doc(turn_index=5.0), BAD, "integer-literal"),
    Case("schema_version 1.0", doc(schema_version=1.0), BAD, "integer-literal"),
    Case("schema_version true", doc(schema_version=True), BAD),
    Case("schema_version 2", doc(schema_version=2), BAD),
    # ts
    Case("naive ts", doc(ts="2026-11-21T10:00:00"), BAD),
    Case("ts as epoch seconds", doc(ts=1_763_719_200), BAD),
    Case("ts year 0001", doc(ts="0001-01-01T00:00:00Z"), BAD),
    Case("ts year 9999", doc(ts="9999-12-31T23:59:59Z"), BAD),
    Case("ts offset pushing UTC past 9999", doc(ts="9999-12-31T23:00:00-05:00"), BAD),
    Case("ts before 1970", doc(ts="1969-12-31T23:59:59Z"), BAD),
    Case("ts after 2199", doc(ts="2200-01-01T00:00:00Z"), BAD),
    Case("ts offset pulling UTC before 1970", doc(ts="1970-01-01T00:30:00+01:00"), BAD, "ts-utc-range"),
    Case("ts offset pushing UTC past 2199", doc(ts="2199-12-31T23:00:00-05:00"), BAD, "ts-utc-range"),
    Case("ts February 29 of a common year", doc(ts="2026-02-29T00:00:00Z"), BAD),
    Case("ts April 31", doc(ts="2026-04-31T00:00:00Z"), BAD),
    Case("ts leap second", doc(ts="2026-12-31T23:59:60Z"), BAD),
    Case("ts without seconds", doc(ts="2026-11-21T10:00Z"), BAD),
    Case("ts with a space", doc(ts="2026-11-21 10:00:00Z"), BAD),
    Case("ts with a trailing newline", doc(ts="2026-11-21T10:00:00Z\n"), BAD),
    Case("ts offset 24:00", doc(ts="2026-11-21T10:00:00+24:00"), BAD),
    Case("ts 10 fraction digits", doc(ts="2026-11-21T10:00:00.1234567891Z"), BAD),
    Case("ts Arabic-Indic digits", doc(ts="٢٠٢٦-11-21T10:00:00Z"), BAD),
    # role, type, shape
    Case("unknown role", doc(role="robot"), BAD),
    Case("unknown type", doc(type="foo"), BAD),
    Case("extra field", doc(extra=1), BAD),
    Case("missing user_id", doc(user_id=DROP), BAD),
    Case("session end with content", doc(SESSION_END, content="x"), BAD),
    Case("not an object", b"[1, 2]", BAD),
    Case("null", b"null", BAD),
    # content
    Case("content lone high surrogate", doc(content="a\ud800b"), BAD),
    Case("content lone low surrogate", doc(content="\udc00"), BAD),
    Case("content reversed pair", doc(content="\udc00\ud800"), BAD),
    Case("content number", doc(content=5), BAD),
    Case("content over the byte limit", doc(content="x" * (MAX_CONTENT_BYTES + 1)), BAD, "content-bytes"),
    # metadata
    Case("metadata NaN", doc(metadata={"a": math.nan}), BAD),
    Case("metadata Infinity", doc(metadata={"a": -math.inf}), BAD),
    Case("metadata 2^63", doc(metadata={"a": 2**63}), BAD),
    Case("metadata -2^63", doc(metadata={"a": -(2**63)}), BAD),
    Case("metadata -2^63-1, a float to orjson", doc(metadata={"a": -(2**63) - 1}), BAD),
    Case("metadata 2^64, a float to orjson", doc(metadata={"a": 2**64}), BAD),
    Case("metadata 1e19", doc(metadata={"a": 1e19}), BAD),
    Case("metadata NUL in a key", doc(metadata={"a\x00": 1}), BAD),
    Case("metadata NUL in a string", doc(metadata={"a": ["ok", "b\x00"]}), BAD),
    Case("metadata lone surrogate in a key", doc(metadata={"\udfff": 1}), BAD),
    Case("metadata 9 levels", doc(metadata=nested(METADATA_MAX_DEPTH + 1)), BAD),
    Case("metadata 300 levels", doc(metadata=nested(300)), BAD),
    Case("metadata 65 keys", doc(metadata={f"k{i}": i for i in range(METADATA_MAX_KEYS + 1)}), BAD),
    Case("metadata 257 items", doc(metadata={"a": list(range(METADATA_MAX_ITEMS + 1))}), BAD),
    Case("metadata 129-character key", doc(metadata={"k" * (METADATA_MAX_KEY_CHARS + 1): 1}), BAD),
    Case("metadata a 17 KiB string", doc(metadata={"blob": "x" * 17 * 1024}), BAD),
    Case("metadata an array", doc(metadata=[1]), BAD),
    Case(
        "metadata 17 KiB over many keys",
        doc(metadata={f"k{i}": "x" * 272 for i in range(METADATA_MAX_KEYS)}),
        BAD,
        "metadata-bytes",
    ),
]


@cache
def _schema(name: str) -> dict[str, Any]:
    schema: dict[str, Any] = json.loads((JSON_DIR / f"{name}.schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return schema


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def schema_accepts(raw: bytes, name: str = "chat_event") -> bool:
    """Standard JSON (no NaN/Infinity), then Draft 2020-12 against a committed schema file."""
    try:
        instance = json.loads(raw, parse_constant=_reject_constant)
    except ValueError:
        return False
    return bool(jsonschema.Draft202012Validator(_schema(name)).is_valid(instance))


def validator_accepts(raw: bytes) -> bool:
    try:
        parse_chat_event(raw, max_content_bytes=MAX_CONTENT_BYTES, tenants=None)
    except InvalidEvent:
        return False
    return True


def _declared_validator_only(node: Any) -> set[str]:
    if isinstance(node, dict):
        found = set(node.get(VALIDATOR_ONLY, {}))
        return found.union(*(_declared_validator_only(v) for v in node.values()))
    if isinstance(node, list):
        return set().union(*(_declared_validator_only(v) for v in node))
    return set()


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_validator_and_schema_agree(case: Case) -> None:
    assert validator_accepts(case.raw) is case.valid
    schema_verdict = case.valid if case.validator_only is None else not case.valid
    assert schema_accepts(case.raw) is schema_verdict
    # The per-type files say the same as the union file.
    per_type = "session_event" if b'"type": "session_end"' in case.raw else "turn_event"
    assert schema_accepts(case.raw, per_type) is schema_verdict


def test_validator_only_rules_are_exactly_the_declared_ones() -> None:
    used = {c.validator_only for c in CASES if c.validator_only}
    assert used == _declared_validator_only(_schema("chat_event"))


# --- the models themselves, with Python values JSON cannot carry ---------------------------------


def turn(**changes: Any) -> TurnEvent | SessionEvent:
    return chat_event_adapter.validate_python({**BASE, **changes})


@pytest.mark.parametrize(
    "changes",
    [
        {"metadata": {"a": math.nan}},
        {"metadata": {"a": math.inf}},
        {"metadata": {"a": [1, -math.inf]}},
        {"metadata": {"a": 2**70}},
        {"metadata": {"a": (1, 2)}},
        {"metadata": {"a": {1, 2}}},
        {"metadata": {"a": b"bytes"}},
        {"metadata": {"a": datetime(2026, 1, 1, tzinfo=UTC)}},
        {"metadata": {1: "int key"}},
        {"metadata": {"\ud800": 1}},
        {"metadata": {"a": "\udfff"}},
        {"content": "a\ud800"},
        {"content": "\ud83d\ude00"},  # a pair as two code points is not text in a Python str
        {"content": b"bytes"},
        {"tenant_id": "t\udc00"},
        {"user_id": b"u1"},
        {"turn_index": True},
        {"turn_index": 5.0},
        {"turn_index": "5"},
        {"role": b"user"},
        {"ts": datetime(2026, 1, 1)},  # naive
        {"ts": date(2026, 1, 1)},
        {"ts": 1_763_719_200},
        {"ts": datetime(2026, 1, 1, tzinfo=timezone(timedelta(seconds=30)))},
        {"ts": datetime(9999, 12, 31, 23, tzinfo=timezone(timedelta(hours=-5)))},  # UTC would overflow
        {"ts": datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=1)))},
        {"ts": datetime(2199, 12, 31, 23, tzinfo=timezone(timedelta(hours=-5)))},
    ],
    ids=repr,
)
def test_models_reject_python_values_json_cannot_carry(changes: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        turn(**changes)


def test_cyclic_metadata_is_a_validation_error_not_a_crash() -> None:
    loop: dict[str, Any] = {}
    loop["self"] = loop
    with pytest.raises(ValidationError, match="deeper than 8 levels"):
        turn(metadata=loop)


def test_python_callers_may_pass_aware_datetimes_and_enums() -> None:
    berlin = datetime(2026, 7, 1, 12, 0, tzinfo=ZoneInfo("Europe/Berlin"))
    event = TurnEvent(**{**BASE, "ts": berlin, "role": Role.ASSISTANT})
    assert event.model_dump(mode="json")["ts"] == "2026-07-01T12:00:00+02:00"
    assert turn(role="assistant") == event.model_copy(update={"ts": datetime(2026, 11, 21, 10, tzinfo=UTC)})


def test_content_is_cleaned_and_normalised_not_rejected() -> None:
    event = turn(content="Cafe\u0301\x00 \x07ok\tA\r\nB\x1b[0m")
    assert isinstance(event, TurnEvent)
    assert event.content == "Caf\u00e9 ok\tA\r\nB[0m"


def test_ts_keeps_offset_and_truncates_below_microseconds() -> None:
    event = turn(ts="2026-11-21T15:30:00.1234569+05:30")
    assert event.ts == datetime(2026, 11, 21, 10, 0, 0, 123456, tzinfo=UTC)
    assert event.model_dump(mode="json")["ts"] == "2026-11-21T15:30:00.123456+05:30"


def test_ts_pattern_is_calendar_exact_for_every_day_in_and_around_the_range() -> None:
    pattern = re.compile(TS_PATTERN)
    for year in range(TS_MIN.year - 1, TS_MAX.year + 2):
        for month in range(0, 14):
            for day in range(0, 33):
                text = f"{year:04d}-{month:02d}-{day:02d}T12:00:00Z"
                try:
                    real = TS_MIN.year <= date(year, month, day).year <= TS_MAX.year
                except ValueError:
                    real = False
                assert (pattern.match(text) is not None) is real, text


# --- property tests -----------------------------------------------------------------------------

# Every code point, surrogates included: what HTTP JSON (Python's json) can hand a model.
any_text = st.text(st.characters(exclude_categories=()), max_size=12)
odd_numbers = st.one_of(
    st.integers(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([0, -1, 2**31 - 1, 2**31, 2**63 - 1, 2**63, 2**64, -(2**63), -(2**63) - 1, 5.0, 1e19, -0.0]),
    st.floats(allow_nan=True, allow_infinity=True),
)
scalars = st.one_of(st.none(), st.booleans(), odd_numbers, any_text)
json_ish = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(any_text, inner, max_size=4)),
    max_leaves=30,
)


@st.composite
def deep(draw: st.DrawFn) -> Any:
    """Containers nested around the depth limit, or far past it."""
    levels = draw(st.sampled_from([METADATA_MAX_DEPTH - 1, METADATA_MAX_DEPTH, METADATA_MAX_DEPTH + 1, 120, 300]))
    value: Any = draw(scalars)
    for _ in range(levels):
        value = [value] if draw(st.booleans()) else {draw(any_text): value}
    return value


ts_text = st.builds(
    "{:04d}-{:02d}-{:02d}{}{:02d}:{:02d}:{:02d}{}{}".format,
    st.sampled_from([1, 1969, 1970, 2026, 2199, 2200, 9999]),
    st.integers(0, 13),
    st.integers(0, 32),
    st.sampled_from(["T", "t", " "]),
    st.integers(0, 24),
    st.integers(0, 60),
    st.integers(0, 61),
    st.sampled_from(["", ".5", ".123456789", ".1234567890"]),
    st.sampled_from(["Z", "z", "", "+00:00", "-00:00", "+05:30", "-05:00", "+23:59", "+24:00", "-12:60"]),
)
# Plausible text: letters, marks, symbols and punctuation from every script, no separators or controls.
plausible_text = st.text(
    st.characters(exclude_categories=("Cs", "Cc", "Zs", "Zl", "Zp"), exclude_characters=":/"), min_size=1, max_size=20
)
ids = st.one_of(
    plausible_text, plausible_text, any_text, st.sampled_from(["x\x1fp", "a:b", "sl/ash", "e\u0301", "a b", ""])
)
field_values = {
    "event_id": ids,
    "tenant_id": ids,
    "user_id": st.one_of(ids, scalars),
    "session_id": ids,
    "turn_index": st.one_of(st.integers(0, TURN_INDEX_MAX), odd_numbers, st.sampled_from(["5", True, None])),
    "role": st.one_of(st.sampled_from(["user", "assistant", "system", "tool", "robot", "USER"]), scalars),
    "content": st.one_of(any_text, st.text(max_size=200), scalars),
    "ts": st.one_of(ts_text, ts_text, any_text, odd_numbers),
    "metadata": st.one_of(json_ish, deep(), st.dictionaries(any_text, json_ish, max_size=6)),
    "type": st.sampled_from(["turn", "turn", "session_end", "other", 1]),
    "schema_version": st.sampled_from([1, 1, 1, 1.0, True, 2, "1"]),
    "surprise": scalars,
}


@st.composite
def events(draw: st.DrawFn) -> dict[str, Any]:
    """The base turn with a few fields replaced or dropped: near enough to valid to reach every rule."""
    out = dict(BASE)
    for name in draw(st.lists(st.sampled_from(sorted(field_values)), min_size=1, max_size=3, unique=True)):
        if draw(st.sampled_from([False] * 9 + [True])):
            out.pop(name, None)
        else:
            out[name] = draw(field_values[name])
    if out.get("type") == "session_end" and draw(st.booleans()):
        out = {k: v for k, v in out.items() if k not in {"turn_index", "role", "content"}}
    return out


def _encode(value: Any, ascii_only: bool) -> bytes:
    """As a producer might: NaN written bare, lone surrogates escaped or as invalid UTF-8 bytes."""
    return json.dumps(value, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")


def assert_within_contract(event: TurnEvent | SessionEvent) -> None:
    """Checked from the outside, without the validator's own helpers."""
    dumped = event.model_dump(mode="json")
    raw = orjson.dumps(dumped)
    assert b"\x00" not in raw
    assert b"\\u0000" not in raw
    for name in ("event_id", "tenant_id", "user_id", "session_id"):
        value = dumped[name]
        assert 1 <= len(value) <= ID_MAX_CHARS
        assert unicodedata.is_normalized("NFC", value)
        assert not any(ch in ":/" or ch.isspace() or unicodedata.category(ch) in {"Cc", "Cs"} for ch in value)
    assert TS_MIN <= event.ts <= TS_MAX
    if isinstance(event, TurnEvent):
        assert type(event.turn_index) is int
        assert 0 <= event.turn_index <= TURN_INDEX_MAX
        assert unicodedata.is_normalized("NFC", event.content)
        assert not any(ord(ch) < 0x20 and ch not in "\t\n\r" for ch in event.content)
    assert len(orjson.dumps(event.metadata)) <= METADATA_MAX_BYTES
    again = chat_event_adapter.validate_python(dumped)
    assert again == event
    assert again.model_dump(mode="json") == dumped
    assert chat_event_adapter.validate_json(raw) == event


def _outcome(raw: bytes) -> TurnEvent | SessionEvent | InvalidEvent:
    try:
        return parse_chat_event(raw, max_content_bytes=MAX_CONTENT_BYTES, tenants=None)
    except InvalidEvent as exc:
        return exc


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events(), st.booleans())
def test_raw_messages_parse_into_the_contract_or_fail_as_invalid_event(
    message: dict[str, Any], ascii_only: bool
) -> None:
    outcome = _outcome(_encode(message, ascii_only))  # any other exception fails the test
    if isinstance(outcome, InvalidEvent):
        assert outcome.reason in {"invalid_json", "oversized", "schema_violation"}
        assert len(outcome.message) <= 300
        assert outcome.message.isprintable()
        outcome.message.encode()
    else:
        assert_within_contract(outcome)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events())
def test_python_values_validate_into_the_contract_or_fail_as_validation_error(message: dict[str, Any]) -> None:
    try:
        event = chat_event_adapter.validate_python(message)
    except ValidationError:
        return
    assert_within_contract(event)


@settings(max_examples=300, deadline=None)
@given(any_text.map(lambda s: json.loads(json.dumps(s))))  # as any JSON decoder hands it over
def test_identifier_rules_match_the_schema_except_nfc(text: str) -> None:
    raw = doc(user_id=text)
    nfc = unicodedata.is_normalized("NFC", text) if not re.search("[\ud800-\udfff]", text) else True
    assert validator_accepts(raw) is (schema_accepts(raw) and nfc)


@settings(max_examples=300, deadline=None)
@given(ts_text)
def test_ts_rules_match_the_schema_except_the_utc_edges(text: str) -> None:
    raw = doc(ts=text)
    if not schema_accepts(raw):
        assert not validator_accepts(raw)
        return
    instant = datetime.fromisoformat(text.upper())
    assert validator_accepts(raw) is (TS_MIN <= instant <= TS_MAX)


@settings(max_examples=300, deadline=None)
@given(st.one_of(json_ish, deep()).filter(lambda v: not _has_non_finite(v)), st.booleans())
def test_metadata_rules_match_the_schema_except_total_size(value: Any, wrap: bool) -> None:
    metadata = {"m": value} if wrap or not isinstance(value, dict) else value
    raw = doc(metadata=metadata)
    if not schema_accepts(raw):
        assert not validator_accepts(raw)
        return
    assert validator_accepts(raw) is (len(orjson.dumps(metadata)) <= METADATA_MAX_BYTES)


def _has_non_finite(value: Any) -> bool:
    """NaN is not JSON: both sides reject it at decoding, tested in the table."""
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, list):
        return any(_has_non_finite(v) for v in value)
    if isinstance(value, dict):
        return any(_has_non_finite(v) for v in value.values())
    return False
