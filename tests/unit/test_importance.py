from datetime import UTC, datetime

import numpy as np
import pytest

from agents.consolidator.importance import (
    THRESHOLD_SCOPE,
    Centroid,
    importance,
    kept,
    novelty,
    salience,
)
from schemas import MemoryCandidate, MemoryType, Provenance
from services.core.textutil import stable_id

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def candidate(text: str, type_: MemoryType = MemoryType.EXCHANGE, entities: tuple[str, ...] = ()) -> MemoryCandidate:
    return MemoryCandidate(
        candidate_id=stable_id(text),
        tenant_id="t",
        user_id="u",
        type=type_,
        text=text,
        importance=0.3,
        confidence=1.0,
        observed_at=NOW,
        entities=list(entities),
        source=Provenance(session_id="s", event_ids=["e1"]),
        extractor="test",
    )


def test_a_new_user_is_fully_novel() -> None:
    assert novelty([1.0, 0.0], None) == 1.0
    assert novelty([1.0, 0.0], Centroid(np.zeros(2), 0)) == 1.0


def test_novelty_is_the_cosine_distance_to_the_centroid() -> None:
    centroid = Centroid(np.array([2.0, 0.0]), 2)
    assert novelty([1.0, 0.0], centroid) == pytest.approx(0.0)
    assert novelty([0.0, 1.0], centroid) == pytest.approx(1.0)
    assert novelty([-1.0, 0.0], centroid) == 1.0  # clamped
    centroid.add([0.0, 2.0])
    assert novelty([1.0, 1.0], centroid) == pytest.approx(0.0)


def test_a_centroid_of_another_dimension_counts_as_none() -> None:
    assert novelty([1.0, 0.0, 0.0], Centroid(np.array([1.0, 0.0]), 1)) == 1.0


def test_salience_terms_add_up_and_cap() -> None:
    assert salience(candidate("ok sure")) == 0.0
    assert salience(candidate("we met", entities=("Anna",))) == pytest.approx(0.3)
    assert salience(candidate("it was on 3 May")) == pytest.approx(0.2)
    assert salience(candidate("I love jazz")) == pytest.approx(0.4)
    assert salience(candidate("jazz", MemoryType.PREFERENCE)) == pytest.approx(0.4)
    assert salience(candidate("extraordinarily")) == pytest.approx(0.1)
    assert salience(candidate("I love my iPhone since 2019", entities=("Anna",))) == 1.0


def test_a_speaker_label_is_not_content() -> None:
    assert salience(candidate("Caroline: ok sure")) == 0.0


def test_importance_weights_novelty_and_salience() -> None:
    assert importance(candidate("ok sure"), [1.0, 0.0], None) == pytest.approx(0.6)
    seen = Centroid(np.array([1.0, 0.0]), 1)
    assert importance(candidate("ok sure"), [1.0, 0.0], seen) == pytest.approx(0.0)
    assert importance(candidate("I love jazz"), [1.0, 0.0], seen) == pytest.approx(0.16)


def test_a_standing_preference_is_important_however_like_the_last_it_reads() -> None:
    seen = Centroid(np.array([1.0, 0.0]), 1)
    gluten = candidate("User preference: I can't eat gluten.", MemoryType.PREFERENCE)
    assert importance(gluten, [1.0, 0.0], seen) == pytest.approx(0.16)  # no novelty: only its salience
    standing = gluten.model_copy(update={"category": "constraint"})
    assert importance(standing, [1.0, 0.0], seen) == pytest.approx(0.9)
    instruction = gluten.model_copy(update={"category": "instruction"})
    assert importance(instruction, [0.0, 1.0], None) == pytest.approx(0.9)  # 0.76 new: the floor still lifts it
    named = instruction.model_copy(update={"text": "Always call me Dr. Okafor, since 2019.", "entities": ["Okafor"]})
    assert importance(named, [0.0, 1.0], None) == pytest.approx(0.96)  # above the floor: its own score


def test_facts_and_preferences_are_kept_whatever_their_importance() -> None:
    assert kept(MemoryType.FACT, 0.0, 0.3, THRESHOLD_SCOPE)
    assert kept(MemoryType.PREFERENCE, 0.0, 0.3, THRESHOLD_SCOPE)
    assert not kept(MemoryType.SEMANTIC, 0.29, 0.3, THRESHOLD_SCOPE)
    assert kept(MemoryType.PATTERN, 0.3, 0.3, THRESHOLD_SCOPE)
    assert not kept(MemoryType.EPISODE, 0.29, 0.3, frozenset({MemoryType.EPISODE}))
    # Exchanges and episodes are outside the default scope: recall and turn coverage need them.
    assert kept(MemoryType.EXCHANGE, 0.0, 0.3, THRESHOLD_SCOPE)
    assert kept(MemoryType.EPISODE, 0.0, 0.3, THRESHOLD_SCOPE)
