"""Stage selection: `--stages` parsing, consumer groups, where the timers go, and what `memstream up` starts."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from services.cli.app import build_parser
from services.core.config import Settings
from services.core.stages import STAGE_NAMES, UnknownStage, group_id, parse_stages, place_timers, without


def test_stages_come_back_in_pipeline_order_each_once() -> None:
    assert parse_stages("consolidator,window") == ("window", "consolidator")
    assert parse_stages(" Embedder , embedder,summarizer ") == ("summarizer", "embedder")
    assert parse_stages("qdrant_sink") == ("qdrant_sink",)


def test_all_means_every_stage() -> None:
    assert parse_stages("all") == STAGE_NAMES == ("window", "summarizer", "embedder", "consolidator", "qdrant_sink")


@pytest.mark.parametrize("text", ["", " , ", ","])
def test_naming_no_stage_is_an_error(text: str) -> None:
    with pytest.raises(UnknownStage, match="no stage named; choose from window, summarizer"):
        parse_stages(text)


def test_an_unknown_stage_is_named_with_the_choices() -> None:
    with pytest.raises(UnknownStage) as caught:
        parse_stages("window,embeder,sumarizer")
    message = str(caught.value)
    assert message.startswith("unknown stages embeder, sumarizer;")
    assert "choose from window, summarizer, embedder, consolidator, qdrant_sink, or all" in message


def test_a_part_of_another_stage_says_where_it_runs() -> None:
    with pytest.raises(UnknownStage, match=r"unknown stage rules \(rule extraction runs inline in the window stage\)"):
        parse_stages("rules")
    with pytest.raises(UnknownStage, match="applied by the consolidator stage"):
        parse_stages("commands")


def test_each_stage_has_a_group_of_its_own_under_the_app_id() -> None:
    groups = {group_id("memstream", stage) for stage in STAGE_NAMES}
    assert groups == {
        "memstream-window",
        "memstream-summarizer",
        "memstream-embedder",
        "memstream-consolidator",
        "memstream-qdrant_sink",
    }
    assert group_id("memstream-g2", "window") == "memstream-g2-window"


def test_leader_jobs_run_with_the_window_and_the_relay_with_an_outbox_writer() -> None:
    every = place_timers(STAGE_NAMES)
    assert (every.leader, every.relay) == ("window", "window")
    split = place_timers(["consolidator", "qdrant_sink"])
    assert (split.leader, split.relay) == (None, "consolidator")
    assert (place_timers(["embedder", "summarizer"]).leader, place_timers(["embedder"]).relay) == (None, None)
    assert place_timers(["window"]).relay == "window"


def test_without_keeps_order() -> None:
    assert without(STAGE_NAMES, "qdrant_sink") == ("window", "summarizer", "embedder", "consolidator")


# --- the command line ---------------------------------------------------------------------


def test_worker_runs_every_stage_by_default() -> None:
    args = build_parser().parse_args(["worker"])
    assert args.stages == STAGE_NAMES
    assert args.with_api is False


def test_worker_takes_a_subset() -> None:
    assert build_parser().parse_args(["worker", "--stages", "embedder,window"]).stages == ("window", "embedder")


def test_an_unknown_stage_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(["worker", "--stages", "window,rules"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "memstream worker: error: argument --stages: unknown stage rules" in err
    assert "choose from window, summarizer, embedder, consolidator, qdrant_sink" in err


# --- the apps a worker process builds -----------------------------------------------------


def _apps(tmp_path: Path, stages: tuple[str, ...]) -> dict[str, tuple[str, list[str], list[str]]]:
    """Per stage: its app id (consumer group), its agents and its timers. Builds only: nothing connects."""
    from agents.app import build_apps
    from services.runtime import Runtime

    settings = Settings(data_dir=tmp_path)
    return {
        built.stage: (built.app.conf.id, sorted(built.app.agents), sorted(t.__name__ for t in built.app._app_tasks))
        for built in build_apps(settings, Runtime.create(settings), stages)
    }


def test_every_stage_in_one_process_is_five_apps_with_the_leader_jobs_on_the_window(tmp_path: Path) -> None:
    from agents.app import STAGES

    assert tuple(STAGES) == STAGE_NAMES
    apps = _apps(tmp_path, STAGE_NAMES)
    assert apps == {
        "window": (
            "memstream-window",
            ["window"],
            ["counts_timer", "idle_sessions_timer", "lag_timer", "maintenance_timer", "outbox_relay"],
        ),
        "summarizer": ("memstream-summarizer", ["summarizer"], ["lag_timer"]),
        "embedder": ("memstream-embedder", ["embedder"], ["lag_timer"]),
        # Both consolidator agents share a group, so one user's candidates and commands meet in one process.
        "consolidator": ("memstream-consolidator", ["commands", "consolidator"], ["lag_timer"]),
        "qdrant_sink": ("memstream-qdrant_sink", ["qdrant_sink"], ["lag_timer"]),
    }


def test_a_process_without_the_window_has_no_leader_jobs(tmp_path: Path) -> None:
    apps = _apps(tmp_path, ("consolidator", "qdrant_sink"))
    assert apps["consolidator"][2] == ["lag_timer", "outbox_relay"]
    assert apps["qdrant_sink"][2] == ["lag_timer"]


# --- what `memstream up` starts -----------------------------------------------------------


def test_one_worker_is_one_process_running_everything() -> None:
    from ops.embedded.app import app_argv

    argv = app_argv(Settings())
    assert argv[-3:] == ["services.cli", "worker", "--with-api"]


def test_more_workers_leave_the_app_the_index_stage_alone(tmp_path: Path) -> None:
    from ops.embedded.app import app_argv, worker_child

    settings = Settings(workers=3, worker_metrics_port=9500)
    assert app_argv(settings)[-4:] == ["worker", "--with-api", "--stages", "qdrant_sink"]
    workers = [worker_child(settings, n, tmp_path) for n in (1, 2, 3)]
    assert [w.name for w in workers] == ["worker-1", "worker-2", "worker-3"]
    for worker in workers:
        assert worker.argv[-3:] == ["worker", "--stages", "window,summarizer,embedder,consolidator"]
        assert "--with-api" not in worker.argv
    assert [w.env and w.env["MEMSTREAM_WORKER_METRICS_PORT"] for w in workers] == ["9500", "9501", "9502"]


@pytest.mark.parametrize("workers", [0, 17])
def test_the_worker_count_is_bounded(workers: int) -> None:
    with pytest.raises(ValidationError):
        Settings(workers=workers)
