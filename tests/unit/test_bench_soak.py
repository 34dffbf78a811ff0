"""The soak bench's arithmetic: process names, RSS growth, lag, lost turns and the goals."""

from __future__ import annotations

from typing import Any

import pytest

from tests.bench.soak import (
    command_name,
    descendants,
    expected_turns,
    goals,
    growth_window,
    lag_by_topic,
    lost_turns,
    memory_by_name,
    process_name,
    rss_growth,
)


def test_postgres_backends_are_one_name_and_aux_processes_keep_theirs() -> None:
    assert process_name("postgres", "postgres: memstream memstream 127.0.0.1(5433) idle\0") == "postgres/backends"
    assert process_name("postgres", "postgres: checkpointer ") == "postgres/checkpointer"
    assert process_name("postgres", "postgres: autovacuum launcher ") == "postgres/autovacuum launcher"
    assert process_name("broker", "/usr/bin/tansu\0broker\0") == "broker/tansu"


def test_other_processes_are_named_by_module_or_program() -> None:
    assert command_name("/work/.venv/bin/python\0-m\0ops.s3store\0/tmp/x/kafka\0") == "ops.s3store"
    assert command_name("/root/bin/tansu-v0.6.0-510f3e2\0broker\0") == "tansu"
    assert command_name("") == "?"


def test_descendants_are_listed_parents_first_and_strangers_left_out() -> None:
    parents = {10: 1, 11: 10, 12: 10, 13: 11, 20: 1, 21: 20}
    assert descendants(10, parents) == [11, 12, 13]
    assert descendants(13, parents) == []


def test_memory_by_name_sums_or_takes_the_largest_and_skips_the_gone() -> None:
    processes = {1: "app", 2: "postgres/backends", 3: "postgres/backends", 4: "worker-1"}
    rss = {1: 300.0, 2: 10.0, 3: 12.0}
    assert memory_by_name(processes, rss.get) == {"app": 300.0, "postgres/backends": 22.0}
    assert memory_by_name(processes, rss.get, max) == {"app": 300.0, "postgres/backends": 12.0}


def test_growth_window_is_the_last_40_minutes_of_an_hour_else_two_thirds() -> None:
    assert growth_window(60) == 40
    assert growth_window(90) == 40
    assert growth_window(3) == 2
    assert growth_window(1) == 1


def test_rss_growth_compares_the_end_with_the_window_start() -> None:
    series = [{"app": 100.0}, {"app": 200.0, "new": 5.0}, {"app": 204.0, "new": 6.0}, {"app": 210.0, "new": 6.0}]
    growth = rss_growth(series, 2)
    assert growth["app"] == pytest.approx(0.05)
    assert growth["new"] == pytest.approx(0.2)
    assert rss_growth(series, 10)["app"] == pytest.approx(1.1)  # a window longer than the run starts at minute 1
    assert rss_growth([], 2) == {}
    assert rss_growth(series[:1], 2) == {}  # one minute is no growth measured, so the goal cannot pass


def test_lag_is_summed_over_partitions_by_topic() -> None:
    samples = [({"topic": "chat.turns", "partition": "0"}, 3.0), ({"topic": "chat.turns", "partition": "1"}, 4.0)]
    assert lag_by_topic([*samples, ({"topic": "memory.embedded", "partition": "0"}, 0.0)]) == {
        "chat.turns": 7.0,
        "memory.embedded": 0.0,
    }


def test_every_turn_of_a_freshness_call_is_expected_from_one_probe_token() -> None:
    expected = expected_turns(["zqab12cdx8", "not a token"], 420)
    assert len(expected) == 420
    assert expected["zqab12cdx0"] == "fresh-0-ab12cd"
    assert expected["zqab12cdx201"] == "fresh-1-ab12cd"


def test_a_turn_is_lost_unless_its_code_word_is_in_a_memory_of_its_own_user() -> None:
    expected = {"zqab12cdx0": "fresh-0-ab12cd", "zqab12cdx1": "fresh-1-ab12cd", "zqab12cdx2": "fresh-2-ab12cd"}
    texts = {
        "fresh-0-ab12cd": ["Liked it. Code word zqab12cdx0.", "episode mentioning zqab12cdx2"],  # x2: wrong user
        "fresh-1-ab12cd": ["summary: zqab12cdx1 and more"],
    }
    assert lost_turns(expected, texts) == ["zqab12cdx2"]


def _minute(rss: float, p99: float | None, misses: int = 0) -> dict[str, Any]:
    errors = {"recall_non_200": 0, "probe_misses": misses, "dlq_new": 0.0, "stage_errors_new": 0.0}
    return {"rss_mib": {"app": rss}, "freshness": {"p99": p99}, "errors": errors}


def test_goals_pass_on_a_flat_clean_run() -> None:
    result = goals([_minute(100, 0.5), _minute(101, 0.6), _minute(102, 0.7)], 0, 3)
    assert all(g["pass"] for g in result.values())


def test_goals_fail_on_growth_a_slow_minute_errors_and_loss() -> None:
    result = goals([_minute(100, 0.5), _minute(100, 1.5, misses=2), _minute(120, None)], 3, 3)
    assert not result["rss_growth"]["pass"]
    assert result["rss_growth"]["worst_process"] == "app"
    assert not result["freshness_p99"]["pass"]
    assert result["errors"]["total"] == 2
    assert not result["errors"]["pass"]
    assert not result["lost"]["pass"]
    assert not goals([], None, 60)["lost"]["pass"]  # an unchecked run never passes
