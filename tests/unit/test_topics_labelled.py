"""Semantic topics on the pattern set's users (tests/bench/topic_set.py prints the figures).

Episodes made as the pipeline makes them; with the default settings 32 of
the 66 themes of three or more sessions get a topic, purity 0.958, covering
0.909 of the theme's sessions. Topics made from labels alone found 9 (1.000,
0.694); counting mentions, 18 (0.962, 0.925), while every entity of two
episodes was kept out as a name. Topics are lexical, so the floors guard
what they are for: naming what a user came back to, and mostly that.
"""

from agents.maintenance.rules.config import Rules
from services.core.config import Settings
from services.embedding import MiniLmEmbedder
from tests.bench.pattern_set import labelled_users
from tests.bench.topic_set import evaluate


def test_topics_find_recurring_themes_and_stay_pure() -> None:
    score = evaluate(labelled_users(), Rules.from_settings(Settings()), MiniLmEmbedder())
    assert score.themes == 66
    assert score.matched >= 28, score.line()
    assert score.purity / score.topics >= 0.93, score.line()
    assert score.coverage / score.matched >= 0.85, score.line()
