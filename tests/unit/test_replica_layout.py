"""Where read replicas run and keep their index: settings, the stack's processes, and `memstream serve --replicas`."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from ops.embedded.app import app_argv, worker_child
from ops.embedded.replicas import replica_child
from services.cli.app import build_parser
from services.core import generations
from services.core.config import Settings


def test_each_replica_keeps_its_shards_apart(tmp_path: Path) -> None:
    one, two = Settings(data_dir=tmp_path, replica=1), Settings(data_dir=tmp_path, replica=2)
    assert Settings(data_dir=tmp_path).qdrant_path == tmp_path / "qdrant"
    assert one.qdrant_path == tmp_path / "replicas" / "r1" / "qdrant"
    assert two.qdrant_path == tmp_path / "replicas" / "r2" / "qdrant"
    assert one.replica_name == "r1"
    assert Settings().replica_name is None
    # A generation's shard on a replica is the replica's too.
    assert generations.scoped(one, "v2").qdrant_path == tmp_path / "replicas" / "r1" / "generations" / "v2" / "qdrant"


def test_with_replicas_the_app_runs_the_stages_without_the_api_or_the_index() -> None:
    argv = app_argv(Settings(read_replicas=2))
    assert argv is not None
    assert argv[-3:] == ["worker", "--stages", "window,summarizer,embedder,consolidator"]
    assert "--with-api" not in argv


def test_with_replicas_and_workers_the_workers_run_the_stages(tmp_path: Path) -> None:
    settings = Settings(read_replicas=3, workers=2)
    assert app_argv(settings) is None
    assert worker_child(settings, 1, tmp_path).argv[-1] == "window,summarizer,embedder,consolidator"


def test_replicas_sharing_a_qdrant_server_leave_the_index_stage_to_the_workers() -> None:
    argv = app_argv(Settings(read_replicas=2, qdrant_url="http://qdrant:6333"))
    assert argv is not None
    assert argv[-1] == "window,summarizer,embedder,consolidator,qdrant_sink"


def test_a_replica_process_is_serve_with_its_number(tmp_path: Path) -> None:
    child = replica_child(Settings(), 3, tmp_path)
    assert child.name == "replica-3"
    assert child.argv[-2:] == ["services.cli", "serve"]
    assert child.env is not None
    assert child.env["MEMSTREAM_REPLICA"] == "3"


def test_serve_takes_a_replica_count(capsys: pytest.CaptureFixture[str]) -> None:
    parser = build_parser()
    assert parser.parse_args(["serve", "--replicas", "3"]).replicas == 3
    assert parser.parse_args(["serve"]).replicas is None
    for wrong in ("17", "-1", "many"):
        with pytest.raises(SystemExit):
            parser.parse_args(["serve", "--replicas", wrong])
        assert "--replicas" in capsys.readouterr().err


@pytest.mark.parametrize("field", ["read_replicas", "replica"])
def test_replica_counts_are_bounded(field: str) -> None:
    with pytest.raises(ValidationError):
        Settings(**{field: 17})
