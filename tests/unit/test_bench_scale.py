"""bench-scale's verdicts: every process it measured counts, the operator's rebuild command included."""

from typing import Any

from tests.bench.scale import RSS_MAX_MIB, goals


def results(rebuild_mib: float | None) -> dict[str, Any]:
    rebuild: dict[str, Any] = {"seconds": 10.0}
    if rebuild_mib is not None:
        rebuild["peak_rss_mib"] = rebuild_mib
    return {
        "plan": {"clients": 8},
        "recall_load": {"concurrent_p95_to_bare_embed": 10.0, "concurrent_marks_p95_to_bare_embed": 11.0},
        "peak_rss_mib_while_seeding": {"app": 700.0, "tansu": 20.0},
        "peak_rss_mib": {"app": 3000.0},
        "index_rebuild": rebuild,
        "restart": {"ready_seconds": 15.0},
    }


def test_a_rebuild_over_the_limit_fails_the_rss_goal_by_name() -> None:
    verdict = goals(results(RSS_MAX_MIB + 1))
    assert verdict["peak_rss"] == {"pass": False, "worst": "memstream rebuild index", "mib": RSS_MAX_MIB + 1}
    assert verdict["recall_p95"]["pass"] is True
    assert verdict["recall_p95"]["worst_p95_to_bare_embed"] == 11.0
    assert verdict["ready"]["pass"] is True


def test_without_a_rebuild_figure_the_stacks_largest_process_decides() -> None:
    verdict = goals(results(None))
    assert verdict["peak_rss"] == {"pass": True, "worst": "app", "mib": 3000.0}


def test_the_anonymous_part_of_a_process_is_read_apart_from_its_peak() -> None:
    import os

    from tests.bench.probe import anon_rss_mib, peak_rss_mib

    anon, peak = anon_rss_mib(os.getpid()), peak_rss_mib(os.getpid())
    assert anon is not None
    assert peak is not None
    assert 0 < anon <= peak
    assert anon_rss_mib(2**22 + 12345) is None  # no such process
