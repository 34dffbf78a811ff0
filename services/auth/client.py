"""The key memstream's own HTTP clients send (`memstream recall`, `memories`, `mcp`): from the environment or the data dir."""

from __future__ import annotations

from services.auth.bootstrap import api_key_path
from services.auth.secret import read_private
from services.core.config import Settings


def client_key(settings: Settings) -> str | None:
    """MEMSTREAM_API_KEY, else the operator key `memstream up` wrote to data_dir/api-key, else None."""
    if settings.api_key is not None:
        return settings.api_key.get_secret_value()
    path = api_key_path(settings)
    try:
        return read_private(path) or None
    except OSError:
        return None


def client_headers(settings: Settings) -> dict[str, str]:
    """`Authorization: Bearer <key>` when there is a key; none otherwise (the server then answers 401)."""
    key = client_key(settings)
    return {"authorization": f"Bearer {key}"} if key else {}
