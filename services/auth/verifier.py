"""Checking a presented key: hash, a short-lived cache, and last-used times written off the request path.

A verified key (and a refused one) is remembered for `ttl` seconds
(MEMSTREAM_AUTH_CACHE_SECONDS, default 5), so the check costs a hash and a
dict lookup on almost every request, and a revocation takes effect within
`ttl` in every process. Refusals are cached too: a client retrying a bad key
in a loop costs Postgres one lookup per `ttl`. The cache is bounded, so a
flood of random keys cannot grow it without limit.

`last_used_at` is written at most once per `touch_every` seconds per key, by
a background task: a request never waits for it, and losing it (Postgres
down, the process stopping) costs only a less recent last-used time.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable
from datetime import UTC, datetime

from services.auth.keys import Principal, key_hash, looks_like_key
from services.auth.store import KeyStore
from services.core.metrics import KEY_LOOKUPS

log = logging.getLogger(__name__)


class KeyVerifier:
    def __init__(
        self,
        store: KeyStore,
        secret: bytes,
        *,
        ttl: float = 5.0,
        touch_every: float = 60.0,
        max_entries: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._store = store
        self._secret = secret
        self.ttl = ttl
        self._touch_every = touch_every
        self._max_entries = max_entries
        self._clock = clock
        # key hash -> (expires at, principal or None for unknown / revoked); insertion order ~ age.
        self._cache: dict[bytes, tuple[float, Principal | None]] = {}
        self._touched: dict[str, float] = {}
        self._pending: dict[str, datetime] = {}
        self._flushing: asyncio.Task[None] | None = None

    async def verify(self, presented: str) -> Principal | None:
        """The principal of an active key; None for anything else. Raises StoreError when Postgres is down."""
        if not looks_like_key(presented):
            return None
        digest = key_hash(self._secret, presented)
        now = self._clock()
        cached = self._cache.get(digest)
        if cached is not None and cached[0] > now:
            KEY_LOOKUPS.labels(source="cache").inc()
            principal = cached[1]
        else:
            KEY_LOOKUPS.labels(source="postgres").inc()
            record = await self._store.find(digest)
            principal = record.principal if record is not None and record.active else None
            self._remember(digest, principal, now)
        if principal is not None and principal.key_id is not None:
            self._note_use(principal.key_id, now)
        return principal

    def forget_cached(self) -> None:
        """Drop every cached answer (tests and benchmarks measure the uncached path with it)."""
        self._cache.clear()

    def _remember(self, digest: bytes, principal: Principal | None, now: float) -> None:
        self._cache.pop(digest, None)
        if len(self._cache) >= self._max_entries:
            self._cache = {k: v for k, v in self._cache.items() if v[0] > now}
            while len(self._cache) >= self._max_entries:
                del self._cache[next(iter(self._cache))]
        self._cache[digest] = (now + self.ttl, principal)

    def _note_use(self, key_id: str, now: float) -> None:
        if now - self._touched.get(key_id, -math.inf) < self._touch_every:
            return
        self._touched[key_id] = now
        self._pending[key_id] = datetime.now(UTC)
        if self._flushing is None or self._flushing.done():
            self._flushing = asyncio.get_running_loop().create_task(self._flush(), name="api-key-last-used")

    async def _flush(self) -> None:
        while self._pending:
            batch, self._pending = self._pending, {}
            try:
                await self._store.touch(batch)
            except Exception as exc:  # best effort: the next use after touch_every tries again
                log.warning("could not record last use of %d API key(s): %r", len(batch), exc)

    async def flush(self) -> None:
        """Wait until the last-used times noted so far are written."""
        while self._flushing is not None and not self._flushing.done():
            await asyncio.shield(self._flushing)
