"""Deterministic ids: stable across releases, and never shared by two different part tuples."""

from __future__ import annotations

import json
import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from services.archive.codec import new_data_key
from services.core.textutil import id_input, keyed_id, stable_id

LEGACY_NAMESPACE = uuid.UUID("6f0d5a52-7b5e-4d0e-9a53-2f1f6c7e0b11")

# Every code point, surrogates and U+001F included, and the separator often.
parts_text = st.text(st.one_of(st.characters(exclude_categories=()), st.just("\x1f")), max_size=8)
part_tuples = st.lists(parts_text, max_size=5).map(tuple)


def decode(namespace: uuid.UUID, name: str) -> tuple[str, ...]:
    """The inverse of id_input: that it exists is what makes the encoding unambiguous."""
    if namespace == LEGACY_NAMESPACE:
        return tuple(name.split("\x1f"))
    return tuple(bytes.fromhex(h).decode("utf-8", "surrogatepass") for h in json.loads(name))


def test_ids_minted_before_the_new_encoding_keep_their_value() -> None:
    assert stable_id("x") == "6a939abf-3f09-5cc6-bc45-e54ec9e5098a"
    assert stable_id("t", "u", "exchange", "e1") == str(uuid.uuid5(LEGACY_NAMESPACE, "t\x1fu\x1fexchange\x1fe1"))


def test_tenant_and_user_split_differently_get_different_ids() -> None:
    assert stable_id("x\x1fp", "q") != stable_id("x", "p\x1fq")
    assert stable_id() != stable_id("")
    assert stable_id("a", "") != stable_id("a")


def test_astral_character_and_its_surrogate_halves_differ() -> None:
    assert stable_id("\U0001f600") != stable_id("\ud83d\ude00")


@settings(max_examples=500, deadline=None)
@given(part_tuples)
def test_encoding_decodes_back_to_the_parts(parts: tuple[str, ...]) -> None:
    assert decode(*id_input(parts)) == parts
    uuid.UUID(stable_id(*parts))  # never raises, whatever the parts hold


@settings(max_examples=500, deadline=None)
@given(part_tuples, st.data())
def test_different_tuples_never_share_an_input(parts: tuple[str, ...], data: st.DataObject) -> None:
    # The dangerous neighbours: the same characters with the separator moved between parts.
    joined = "\x1f".join(parts)
    cuts = data.draw(st.lists(st.integers(0, len(joined)), max_size=3, unique=True).map(sorted))
    other = tuple(joined[i:j] for i, j in zip([0, *cuts], [*cuts, len(joined)], strict=True))
    other = other if data.draw(st.booleans()) else data.draw(part_tuples)
    assert (id_input(parts) == id_input(other)) is (parts == other)


@given(st.binary(min_size=1, max_size=40), st.tuples(st.text(max_size=20), st.text(max_size=20)))
@settings(max_examples=100)
def test_a_keyed_id_is_a_version_8_uuid_fixed_by_its_secret_and_parts(secret: bytes, parts: tuple[str, str]) -> None:
    made = keyed_id(secret, *parts)
    assert made == keyed_id(secret, *parts)
    parsed = uuid.UUID(made)
    assert (parsed.version, parsed.variant) == (8, uuid.RFC_4122)
    assert made != keyed_id(secret + b"x", *parts)
    assert made != stable_id(*parts)


def test_a_memory_id_differs_per_user_key_and_from_the_content_id() -> None:
    derived = stable_id("t", "u", "fact", "location", "city", "lisbon")
    alice, bob = new_data_key("t", "alice"), new_data_key("t", "bob")
    assert alice.memory_id(derived) == alice.memory_id(derived)
    assert len({alice.memory_id(derived), bob.memory_id(derived), derived}) == 3
    assert new_data_key("t", "alice").memory_id(derived) != alice.memory_id(derived)  # a new key after a forget
