"""The rules of the `chat.turns` contract, each stated once for both audiences.

Every rule here is a pure check used by the pydantic models *and* a JSON Schema
fragment that says the same to producers in other languages. Where the check
is a regular expression it is the schema's own, and all of them stay inside the
subset that ECMA-262 (JSON Schema's dialect) and Python's `re` read alike:
`[0-9]` rather than `\\d` (Python's `\\d` matches any Unicode digit), explicit
classes rather than `\\s` (the engines disagree on whitespace), no lookaround,
and "must not contain" rules as `not: {pattern}` searches instead of `^...$`
anchors (Python's `$` also matches before a trailing newline).

What JSON Schema cannot say (NFC, the UTC instant near the range ends,
integral floats, total serialized size) is listed per field under
`x-memstream-validator-only`, so a reader of the schema knows where the two differ.
"""

from __future__ import annotations

import math
import re
import unicodedata
from datetime import UTC, datetime, timedelta, timezone
from typing import Annotated, Any, NoReturn, Union

import orjson
from pydantic import AfterValidator, BeforeValidator, Field, PlainValidator, Strict, WithJsonSchema
from pydantic_core import PydanticCustomError
from typing_extensions import TypeAliasType

# --- limits -------------------------------------------------------------------

ID_MAX_CHARS = 200  # code points (what JSON Schema's maxLength counts): at most 800 UTF-8 bytes
TURN_INDEX_MAX = 2**31 - 1  # Postgres `integer`
TS_MIN = datetime(1970, 1, 1, tzinfo=UTC)
TS_MAX = datetime(2199, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC)
METADATA_MAX_DEPTH = 8  # the metadata object itself is level 1
METADATA_MAX_KEYS = 64  # per object
METADATA_MAX_ITEMS = 256  # per array
METADATA_MAX_KEY_CHARS = 128
METADATA_MAX_BYTES = 16 * 1024  # compact UTF-8 JSON, as orjson writes it
METADATA_MAX_STRING_CHARS = METADATA_MAX_BYTES  # implied by the byte limit; stated so the schema can check it
# Metadata numbers: what orjson writes, a signed 64-bit reader holds and a
# double represents exactly. 2^63-1 itself is not a double: a schema validator
# comparing in doubles rounds it to 2^63 and would admit 2^63; the largest
# double below 2^63 keeps validator and schema in agreement. Symmetric.
NUMBER_MIN, NUMBER_MAX = -(2**63 - 1024), 2**63 - 1024

VALIDATOR_ONLY = "x-memstream-validator-only"

# --- regular expressions (ECMA-262 and Python `re` alike) ---------------------

# A surrogate code unit without its partner. In UTF-16 engines a valid pair is
# two units and is not matched; in code-point engines it is one code point.
LONE_SURROGATE = r"(?:^|[^\ud800-\udbff])[\udc00-\udfff]|[\ud800-\udbff](?:[^\udc00-\udfff]|$)"
# C0 controls, space, DEL, C1 controls, NBSP, every other Unicode White_Space
# character and U+FEFF, plus the key separator ':' and '/' (ids are URL path
# segments of the HTTP API, and a decoded '/' cannot be routed).
_ID_FORBIDDEN_CLASS = r"[:/\u0000-\u0020\u007f-\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff]"
ID_FORBIDDEN = f"{_ID_FORBIDDEN_CLASS}|{LONE_SURROGATE}"
METADATA_STRING_FORBIDDEN = rf"\u0000|{LONE_SURROGATE}"


def _leap_years(first: int, last: int) -> str:
    """`(?:197[26]|198[048]|...)`: the leap years in [first, last], grouped by decade."""
    by_decade: dict[int, list[str]] = {}
    for year in range(first, last + 1):
        if year % 4 == 0 and (year % 100 != 0 or year % 400 == 0):
            by_decade.setdefault(year // 10, []).append(str(year % 10))
    return "(?:" + "|".join(f"{decade}[{''.join(units)}]" for decade, units in by_decade.items()) + ")"


_YEAR = "(?:19[7-9][0-9]|2[01][0-9][0-9])"  # TS_MIN.year..TS_MAX.year, as written
_MONTH_DAY = (
    "(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])"
    "|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)"
    "|02-(?:0[1-9]|1[0-9]|2[0-8]))"
)
_DATE = f"(?:{_YEAR}-{_MONTH_DAY}|{_leap_years(TS_MIN.year, TS_MAX.year)}-02-29)"
_TIME = "(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:[.][0-9]{1,9})?"
_OFFSET = "(?:[Zz]|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])"
# RFC 3339 `date-time`, calendar-exact, written year within the range, no leap second.
TS_PATTERN = f"^{_DATE}[Tt]{_TIME}{_OFFSET}$"
# Anything else at all (e.g. the trailing newline Python's `$` lets through).
TS_FORBIDDEN = "[^-+.:0-9TZtz]"

_ID_FORBIDDEN_RE = re.compile(_ID_FORBIDDEN_CLASS)
_ANY_SURROGATE_RE = re.compile(r"[\ud800-\udfff]")
_TS_RE = re.compile(TS_PATTERN)
_TS_FORBIDDEN_RE = re.compile(TS_FORBIDDEN)
_TS_PARTS = re.compile(
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})[Tt]([0-9]{2}):([0-9]{2}):([0-9]{2})(?:[.]([0-9]{1,9}))?"
    r"(?:[Zz]|([+-])([0-9]{2}):([0-9]{2}))?"
)
# C0 controls except TAB, LF, CR: removed from content (a regex: str.translate is 20x slower).
_C0_STRIP = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f]")


def fail(kind: str, message: str) -> NoReturn:
    """A validation error pydantic reports as-is (no "Value error," prefix)."""
    raise PydanticCustomError(kind, message)


def _code_point(ch: str) -> str:
    return repr(ch) if ch.isprintable() and ord(ch) < 0x80 else f"U+{ord(ch):04X}"


def has_surrogate(text: str) -> bool:
    """Any surrogate code point: JSON decoders join escaped pairs, so in a str every one is invalid text."""
    return _ANY_SURROGATE_RE.search(text) is not None


# --- identifiers ----------------------------------------------------------------


def check_identifier(value: str) -> str:
    """Ids are Kafka keys (`tenant:user`), Postgres text and hash input: byte-stable, separator-free."""
    if not 1 <= len(value) <= ID_MAX_CHARS:
        fail("identifier_length", f"must be 1 to {ID_MAX_CHARS} characters, got {len(value)}")
    if found := _ID_FORBIDDEN_RE.search(value):
        fail(
            "identifier_char",
            f"must not contain ':', '/', whitespace or control characters (found {_code_point(found.group())})",
        )
    if has_surrogate(value):
        fail("identifier_surrogate", "must be valid Unicode (found a lone surrogate)")
    if not unicodedata.is_normalized("NFC", value):
        fail("identifier_nfc", "must be in Unicode normalization form NFC (ids are compared byte for byte)")
    return value


_ID_SCHEMA: dict[str, Any] = {
    "type": "string",
    "minLength": 1,
    "maxLength": ID_MAX_CHARS,
    "not": {"pattern": ID_FORBIDDEN},
    "description": (
        f"1 to {ID_MAX_CHARS} characters (code points); no ':', '/', whitespace, C0/C1 control character, DEL "
        "or lone surrogate; already NFC-normalised."
    ),
    VALIDATOR_ONLY: {"id-nfc": "must already be NFC; normalisation is not expressible in JSON Schema"},
}

Identifier = Annotated[str, Strict(), AfterValidator(check_identifier), WithJsonSchema(_ID_SCHEMA)]


# --- integers -------------------------------------------------------------------


def require_int(value: object) -> object:
    """5.0 and True compare equal to 5 and 1; a contract field wants the integer itself."""
    if type(value) is not int:
        fail("int_type", f"must be a JSON integer, not {type(value).__name__}")
    return value


_INTEGRAL_FLOAT = {
    "integer-literal": "integral floats such as 5.0 are rejected; JSON Schema's data model does not tell them from 5"
}

INTEGER_LITERAL_NOTE: dict[str, Any] = {VALIDATOR_ONLY: _INTEGRAL_FLOAT}

# Strict: "5", 5.0 and true are type errors, not quietly 5 and 1.
TurnIndex = Annotated[int, Strict(), Field(ge=0, le=TURN_INDEX_MAX, json_schema_extra=INTEGER_LITERAL_NOTE)]


# --- timestamps -------------------------------------------------------------------


def _ts_message(text: str) -> str:
    parts = _TS_PARTS.fullmatch(text)
    if parts is None:
        return "must be an RFC 3339 date-time such as 2026-11-21T10:00:00Z"
    if parts.group(8) is None and text[-1] not in "Zz":
        return "must carry a UTC offset (Z or +hh:mm); naive times are ambiguous"
    if not TS_MIN.year <= int(parts.group(1)) <= TS_MAX.year:
        return f"year must be within {TS_MIN.year}..{TS_MAX.year}"
    return "is not a valid RFC 3339 date-time (calendar date, hour 00-23, minute and second 00-59, offset below 24h)"


def _parse_ts(text: str) -> datetime:
    if not _TS_RE.match(text) or _TS_FORBIDDEN_RE.search(text):
        fail("timestamp_format", _ts_message(text))
    parts = _TS_PARTS.fullmatch(text)
    assert parts is not None  # TS_PATTERN only admits what _TS_PARTS reads
    year, month, day, hour, minute, second, fraction, sign, off_h, off_m = parts.groups()
    offset = (
        timedelta(0) if sign is None else (1 if sign == "+" else -1) * timedelta(hours=int(off_h), minutes=int(off_m))
    )
    micros = int((fraction or "0")[:6].ljust(6, "0"))  # finer than microseconds is truncated
    return datetime(
        int(year), int(month), int(day), int(hour), int(minute), int(second), micros, tzinfo=timezone(offset)
    )


def check_timestamp(value: object) -> datetime:
    """Strings must be RFC 3339 with an offset; epoch numbers are refused: seconds or millis is a guess."""
    if isinstance(value, str):
        ts = _parse_ts(value)
    elif isinstance(value, datetime):
        offset = value.utcoffset()
        if offset is None:
            fail("timestamp_naive", "must carry a UTC offset; naive times are ambiguous")
        if offset % timedelta(minutes=1):
            fail("timestamp_offset", "UTC offset must be whole minutes (RFC 3339 cannot write seconds)")
        if not TS_MIN.year <= value.year <= TS_MAX.year:
            fail("timestamp_range", f"year must be within {TS_MIN.year}..{TS_MAX.year}")
        ts = value
    else:
        fail("timestamp_type", f"must be an RFC 3339 date-time string, not {type(value).__name__}")
    if not TS_MIN <= ts <= TS_MAX:
        fail("timestamp_range", f"must lie within {TS_MIN:%Y-%m-%dT%H:%M:%SZ}..{TS_MAX:%Y-%m-%dT%H:%M:%S.%fZ} in UTC")
    return ts


_TS_SCHEMA: dict[str, Any] = {
    "type": "string",
    "format": "date-time",
    "pattern": TS_PATTERN,
    "not": {"pattern": TS_FORBIDDEN},
    "description": (
        "RFC 3339 date-time with a UTC offset (Z or +hh:mm), seconds required, up to 9 fraction digits "
        "(kept to microseconds), no leap second. The written year and the UTC instant must both lie within "
        f"{TS_MIN:%Y-%m-%dT%H:%M:%SZ} .. {TS_MAX:%Y-%m-%dT%H:%M:%S.%fZ}. Epoch numbers are not accepted."
    ),
    "x-memstream-utc-range": [TS_MIN.isoformat().replace("+00:00", "Z"), TS_MAX.isoformat().replace("+00:00", "Z")],
    VALIDATOR_ONLY: {
        "ts-utc-range": (
            "the UTC instant must be in range: the pattern bounds the written year, so only an offset "
            f"on {TS_MIN:%Y-%m-%d} or {TS_MAX:%Y-%m-%d} can push it out, which a pattern cannot compute"
        )
    },
}

Timestamp = Annotated[datetime, BeforeValidator(check_timestamp), WithJsonSchema(_TS_SCHEMA)]


# --- content ----------------------------------------------------------------------


def clean_text(value: str) -> str:
    """A stray control character does not make a message less real; a lone surrogate makes it not text."""
    if has_surrogate(value):
        fail("text_surrogate", "must be valid Unicode (found a lone surrogate)")
    return unicodedata.normalize("NFC", _C0_STRIP.sub("", value))


_CONTENT_SCHEMA: dict[str, Any] = {
    "type": "string",
    "not": {"pattern": LONE_SURROGATE},
    "description": (
        "Message text. No lone surrogates. Stored NFC-normalised, with C0 control characters other than "
        "TAB, LF and CR (NUL included) removed; the byte limit (MEMSTREAM_MAX_CONTENT_BYTES, default 65536) "
        "applies to that stored form."
    ),
    "x-memstream-normalization": "strip U+0000-U+0008, U+000B, U+000C, U+000E-U+001F; then NFC",
    VALIDATOR_ONLY: {"content-bytes": "the UTF-8 byte limit is the consumer's setting and applies after normalisation"},
}

Content = Annotated[str, Strict(), AfterValidator(clean_text), WithJsonSchema(_CONTENT_SCHEMA)]


# --- metadata ---------------------------------------------------------------------


def _where(path: str) -> str:
    return path or "the top level"


def _check_string(text: str, what: str, path: str) -> None:
    if "\x00" in text:
        fail("metadata_nul", f"{what} at {_where(path)} must not contain NUL (U+0000)")
    if has_surrogate(text):
        fail("metadata_surrogate", f"{what} at {_where(path)} must be valid Unicode (found a lone surrogate)")


def _shown(key: str) -> str:
    return repr(key if len(key) <= 24 else key[:24] + "...")


def _child(path: str, key: str) -> str:
    return f"{path}[{_shown(key)}]"


def _check_value(value: object, depth: int, path: str) -> Any:
    """A fresh plain copy of `value`, or the first rule it breaks; `depth` is the level a container here sits at.

    Only exact JSON types pass: a tuple, set, bytes or enum would serialise as
    something else than what the producer held, or not at all.
    """
    if value is None or type(value) is bool:
        return value
    if type(value) is str:
        if len(value) > METADATA_MAX_STRING_CHARS:
            fail("metadata_string", f"string at {_where(path)} is longer than {METADATA_MAX_STRING_CHARS} characters")
        _check_string(value, "string", path)
        return value
    if type(value) is int or type(value) is float:
        if not math.isfinite(value):
            fail("metadata_number", f"number at {_where(path)} must be finite (no NaN or Infinity)")
        if not NUMBER_MIN <= value <= NUMBER_MAX:
            fail("metadata_number", f"number at {_where(path)} must be within ±(2^63-1024)")
        return value
    if type(value) is list:
        _check_depth(depth, path)
        if len(value) > METADATA_MAX_ITEMS:
            fail("metadata_items", f"array at {_where(path)} has more than {METADATA_MAX_ITEMS} items")
        return [_check_value(item, depth + 1, f"{path}[{i}]") for i, item in enumerate(value)]
    if type(value) is dict:
        _check_depth(depth, path)
        if len(value) > METADATA_MAX_KEYS:
            fail("metadata_keys", f"object at {_where(path)} has more than {METADATA_MAX_KEYS} keys")
        return {_check_key(key, path): _check_value(item, depth + 1, _child(path, key)) for key, item in value.items()}
    fail("metadata_type", f"value at {_where(path)} must be a JSON value, not {type(value).__name__}")


def _check_depth(depth: int, path: str) -> None:
    if depth > METADATA_MAX_DEPTH:
        fail("metadata_depth", f"containers nest deeper than {METADATA_MAX_DEPTH} levels at {_where(path)}")


def _check_key(key: object, path: str) -> str:
    if type(key) is not str:
        fail("metadata_key", f"key at {_where(path)} must be a string, not {type(key).__name__}")
    if len(key) > METADATA_MAX_KEY_CHARS:
        fail("metadata_key", f"key {_shown(key)} at {_where(path)} is longer than {METADATA_MAX_KEY_CHARS} characters")
    _check_string(key, f"key {_shown(key)}", path)
    return key


def check_metadata(value: object) -> dict[str, Any]:
    """Metadata travels into every derived memory's provenance (jsonb, Qdrant payload): keep it bounded and storable."""
    if type(value) is not dict:
        fail("metadata_type", f"must be a JSON object, not {type(value).__name__}")
    clean: dict[str, Any] = _check_value(value, 1, "")
    size = len(orjson.dumps(clean))
    if size > METADATA_MAX_BYTES:
        fail("metadata_size", f"is {size} bytes as compact JSON, limit {METADATA_MAX_BYTES}")
    return clean


# Schema-only types: they exist to generate the nested `$defs`; check_metadata does the validating.
MetadataKey = TypeAliasType(
    "MetadataKey",
    Annotated[
        str,
        WithJsonSchema(
            {"type": "string", "maxLength": METADATA_MAX_KEY_CHARS, "not": {"pattern": METADATA_STRING_FORBIDDEN}}
        ),
    ],
)
MetadataString = TypeAliasType(
    "MetadataString",
    Annotated[
        str,
        WithJsonSchema(
            {"type": "string", "maxLength": METADATA_MAX_STRING_CHARS, "not": {"pattern": METADATA_STRING_FORBIDDEN}}
        ),
    ],
)
MetadataNumber = TypeAliasType(
    "MetadataNumber", Annotated[float, WithJsonSchema({"type": "number", "minimum": NUMBER_MIN, "maximum": NUMBER_MAX})]
)


def _object_of(value_type: Any) -> Any:
    return Annotated[dict[MetadataKey, value_type], Field(max_length=METADATA_MAX_KEYS)]


def _value_at(depth: int) -> Any:
    """`MetadataValue{depth}`: a value inside a container at depth-1; containers only while depth <= the limit."""
    members: list[Any] = [MetadataString, MetadataNumber, bool, None]
    if depth <= METADATA_MAX_DEPTH:
        inner = _value_at(depth + 1)
        members += [Annotated[list[inner], Field(max_length=METADATA_MAX_ITEMS)], _object_of(inner)]  # type: ignore[valid-type]
    return TypeAliasType(f"MetadataValue{depth}", Union[tuple(members)])  # noqa: UP007 - built at runtime


_METADATA_SCHEMA_TYPE = _object_of(_value_at(2))

_METADATA_EXTRA: dict[str, Any] = {
    "description": (
        f"JSON object; containers nest at most {METADATA_MAX_DEPTH} levels (this object is level 1); at most "
        f"{METADATA_MAX_KEYS} keys per object, {METADATA_MAX_ITEMS} items per array, {METADATA_MAX_KEY_CHARS}-character "
        f"keys; no NUL or lone surrogate in keys or strings; numbers finite and within ±(2^63-1024); at most "
        f"{METADATA_MAX_BYTES} bytes as compact UTF-8 JSON. Stored unchanged (not normalised)."
    ),
    "x-memstream-max-bytes": METADATA_MAX_BYTES,
    VALIDATOR_ONLY: {"metadata-bytes": f"total size as compact UTF-8 JSON at most {METADATA_MAX_BYTES} bytes"},
}

Metadata = Annotated[
    dict[str, Any],
    PlainValidator(check_metadata, json_schema_input_type=_METADATA_SCHEMA_TYPE),
    Field(json_schema_extra=_METADATA_EXTRA),
]
