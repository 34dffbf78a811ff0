"""Crash points for fault tests: the process kills itself (SIGKILL) at a named point, once.

`MEMSTREAM_CRASH_POINTS='{"window.after_commit": 5}'` makes the 5th pass
through that point kill the process, as a power cut would: no cleanup, no
flush. A marker file under the data dir keeps the restarted process from
crashing again. Unset (the default), a crash point is a dictionary lookup.
"""

from __future__ import annotations

import logging
import os
import signal
from collections import Counter

from services.core.config import Settings

log = logging.getLogger(__name__)
_passes: Counter[str] = Counter()

POINTS = (
    "window.after_commit",  # window state and outbox committed, nothing sent
    "window.after_publish",  # sent, outbox rows not yet deleted
    "embedder.after_background_forward",  # derived candidates on memory.embedded, not acknowledged
    "consolidator.after_commit",  # memory committed, no change published
    "qdrant_sink.after_index",  # index updated, offsets not committed
)


def crash_point(settings: Settings, name: str) -> None:
    wanted = settings.crash_points.get(name)
    if wanted is None:
        return
    _passes[name] += 1
    marker = settings.data_dir / "run" / f"crashed-{name}"
    if _passes[name] >= wanted and not marker.exists():
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text(str(_passes[name]))
        log.warning("crash point %s reached (pass %d): SIGKILL", name, _passes[name])
        os.kill(os.getpid(), signal.SIGKILL)
