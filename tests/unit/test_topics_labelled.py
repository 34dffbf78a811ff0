"""Semantic topics on the pattern set's users (tests/bench/topic_set.py prints the figures).

With the default settings 27 of the 66 themes of three or more sessions get
a topic, purity 0.919, covering 0.851 of the theme's sessions; topics made
from labels alone found 15 (0.917, 0.569). Topics are lexical, so the floors
guard what they are for: naming what a user came back to, and mostly that.
"""

from agents.maintenance.rules.config import Rules
from services.core.config import Settings
from tests.bench.pattern_set import labelled_users
from tests.bench.topic_set import evaluate


def test_topics_find_recurring_themes_and_stay_pure() -> None:
    score = evaluate(labelled_users(), Rules.from_settings(Settings()))
    assert score.themes == 66
    assert score.matched >= 24, score.line()
    assert score.purity / score.topics >= 0.88, score.line()
    assert score.coverage / score.matched >= 0.8, score.line()
