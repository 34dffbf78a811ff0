"""Deterministic ids: stable across releases, and never shared by two different part tuples."""

from __future__ import annotations

import json
import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from services.textutil import id_input, stable_id

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
