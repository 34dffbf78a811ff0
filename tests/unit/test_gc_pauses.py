"""Every garbage collection of a tuned process is timed on `memstream_gc_pause_seconds` (services/process/runner.py)."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

from services.core import metrics
from services.core.config import Settings
from services.process import runner


def collections(generation: int) -> float:
    count = REGISTRY.get_sample_value("memstream_gc_pause_seconds_count", {"generation": str(generation)})
    return count or 0.0


def clocks() -> list[object]:
    return [callback for callback in gc.callbacks if isinstance(callback, runner._CollectionClock)]


@pytest.fixture
def tuned(tmp_path: Path) -> Iterator[None]:
    threshold = gc.get_threshold()
    runner._tune_gc(Settings(data_dir=tmp_path))
    try:
        yield
    finally:
        for callback in clocks():
            gc.callbacks.remove(callback)
        gc.unfreeze()
        gc.set_threshold(*threshold)


def test_each_collection_is_timed_by_generation_and_tuning_twice_times_it_once(tmp_path: Path, tuned: None) -> None:
    runner._tune_gc(Settings(data_dir=tmp_path))  # a second app in the process
    assert len(clocks()) == 1
    full, young = collections(2), collections(0)
    gc.collect()
    gc.collect(0)
    assert collections(2) == full + 1
    assert collections(0) >= young + 1
    held = REGISTRY.get_sample_value("memstream_gc_pause_seconds_sum", {"generation": "2"})
    assert held is not None
    assert held > 0


def test_a_collection_while_a_scrape_holds_the_metrics_lock_does_not_deadlock(tuned: None) -> None:
    """A scrape copies the histogram's children under its lock, and that copy can start a collection."""
    full = collections(2)

    def scrape_starting_a_collection() -> None:
        with metrics.GC_PAUSE._lock:
            gc.collect()

    worker = threading.Thread(target=scrape_starting_a_collection, daemon=True)
    worker.start()
    worker.join(10)
    assert not worker.is_alive(), "the collection's callback waited for a lock its own thread held"
    assert collections(2) == full + 1
