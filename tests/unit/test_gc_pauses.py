"""Every garbage collection of a tuned process is timed on `memstream_gc_pause_seconds` (services/process/runner.py)."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

from services.core.config import Settings
from services.process import runner


def collections(generation: int) -> float:
    count = REGISTRY.get_sample_value("memstream_gc_pause_seconds_count", {"generation": str(generation)})
    return count or 0.0


@pytest.fixture
def tuned(tmp_path: Path) -> Iterator[None]:
    threshold = gc.get_threshold()
    runner._tune_gc(Settings(data_dir=tmp_path))
    try:
        yield
    finally:
        gc.callbacks.remove(runner._time_collections)
        gc.unfreeze()
        gc.set_threshold(*threshold)


def test_each_collection_is_timed_by_generation_and_tuning_twice_times_it_once(tmp_path: Path, tuned: None) -> None:
    runner._tune_gc(Settings(data_dir=tmp_path))  # a second app in the process
    assert gc.callbacks.count(runner._time_collections) == 1
    full, young = collections(2), collections(0)
    gc.collect()
    gc.collect(0)
    assert collections(2) == full + 1
    assert collections(0) >= young + 1
    held = REGISTRY.get_sample_value("memstream_gc_pause_seconds_sum", {"generation": "2"})
    assert held is not None
    assert held > 0
