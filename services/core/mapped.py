"""A small file the processes of one stack map together: the state they share without a store round trip.

Read replicas and worker processes on one host share the cores, and each
must see a little of the others' state on every request (connection counts,
services/api/balance.py; when a stage last ran late, services/core/backlog.py).
A mapped file costs a memory read, where Postgres would cost a round trip.
"""

from __future__ import annotations

import mmap
import os
from pathlib import Path


def mapped(path: Path, size: int) -> mmap.mmap:
    """`path` mapped read-write, created (zero-filled to `size`) by whichever process comes first."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        if os.fstat(fd).st_size < size:
            os.ftruncate(fd, size)
        return mmap.mmap(fd, size)
    finally:
        os.close(fd)
