"""The key-hashing secret, and files only their owner may read.

The secret comes from MEMSTREAM_AUTH_SECRET, or else from `data_dir/auth-secret`,
generated the first time anything needs it. Every process that creates or
checks keys must use the same one (the embedded stack's processes share the
data dir); losing it invalidates every key, as a new one would.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import stat
from pathlib import Path

from services.core.config import Settings
from services.core.errors import ConfigError

log = logging.getLogger(__name__)

SECRET_FILE = "auth-secret"
_MIN_SECRET_CHARS = 16


def write_private(path: Path, text: str, *, replace: bool) -> bool:
    """Write `text` to `path`, readable by its owner only (0600), appearing whole or not at all.

    Without `replace`, an existing file wins (False): two processes starting
    together end up with the same content, never a half-written file.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        if replace:
            os.replace(tmp, path)
            return True
        try:
            os.link(tmp, path)
        except FileExistsError:
            return False
        return True
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


def read_private(path: Path) -> str:
    """The file's text; a file others can read is narrowed to 0600 first, with a warning."""
    mode = path.stat().st_mode
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        log.warning("%s was readable by others (mode %o); narrowing it to 0600", path, stat.S_IMODE(mode))
        path.chmod(0o600)
    return path.read_text().strip()


def load_secret(settings: Settings) -> bytes:
    if settings.auth_secret is not None:
        value = settings.auth_secret.get_secret_value()
        if len(value) < _MIN_SECRET_CHARS:
            raise ConfigError(f"MEMSTREAM_AUTH_SECRET must be at least {_MIN_SECRET_CHARS} characters")
        return value.encode()
    path = settings.data_dir / SECRET_FILE
    if write_private(path, secrets.token_urlsafe(32) + "\n", replace=False):
        log.info("generated the API key hashing secret in %s", path)
    value = read_private(path)
    if len(value) < _MIN_SECRET_CHARS:
        raise ConfigError(f"{path} holds no usable secret; remove it to generate one (every API key becomes invalid)")
    return value.encode()
