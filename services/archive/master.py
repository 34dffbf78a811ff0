"""The master key: from MEMSTREAM_MASTER_KEY, or from `data_dir/master-key` (0600), which `memstream up` generates.

It wraps every user's data key, so whoever holds it and a copy of the
`user_keys` table can read the archive; without it nobody can, including
memstream. Every process that writes or reads `memory.archive` must be given
the same one.
"""

from __future__ import annotations

import logging
from pathlib import Path

from services.archive.codec import MasterKey
from services.auth.secret import read_private, write_private
from services.core.config import Settings
from services.core.errors import ConfigError

log = logging.getLogger(__name__)

MASTER_KEY_FILE = "master-key"


def master_key_path(settings: Settings) -> Path:
    return settings.data_dir / MASTER_KEY_FILE


def ensure_master_key_file(settings: Settings) -> bool:
    """Generate data_dir/master-key unless it exists or MEMSTREAM_MASTER_KEY is set; True when it made one."""
    if settings.master_key is not None:
        return False
    path = master_key_path(settings)
    created = write_private(path, MasterKey.generate_base64() + "\n", replace=False)
    if created:
        log.warning("generated the archive master key in %s: back it up, without it the archive is unreadable", path)
    return created


def load_master_key(settings: Settings, *, create: bool = False) -> MasterKey:
    """The configured master key; `create` generates the data dir's file when there is none (the window stage).

    A reader never creates one: a new master key could open nothing that was written before it.
    """
    if settings.master_key is not None:
        try:
            return MasterKey.from_base64(settings.master_key.get_secret_value())
        except ValueError as exc:
            raise ConfigError(f"MEMSTREAM_MASTER_KEY: {exc}") from None
    path = master_key_path(settings)
    if create:
        ensure_master_key_file(settings)
    if not path.exists():
        raise ConfigError(f"no archive master key: set MEMSTREAM_MASTER_KEY or give the data dir holding {path.name}")
    try:
        return MasterKey.from_base64(read_private(path))
    except ValueError as exc:
        raise ConfigError(f"{path}: {exc}") from None
