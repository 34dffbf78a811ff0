"""API keys: what a key is, how it is hashed, and who it speaks for. Pure, no I/O.

A key is `ms_` + 32 random bytes (urlsafe base64), so it cannot be guessed
and needs no slow hash: a keyed hash (HMAC-SHA256 with a server secret) is
enough, and being deterministic it lets Postgres find a key by its hash
through a unique index. A stolen table without the secret matches nothing.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from enum import StrEnum

KEY_PREFIX = "ms_"
_KEY_BYTES = 32
# `ms_` + 43 base64 characters; anything much longer is not ours and is refused before hashing.
MAX_KEY_CHARS = 128
# Shown in listings so a person can tell their keys apart: 6 of the 256 random bits.
HINT_CHARS = len(KEY_PREFIX) + 6


class Role(StrEnum):
    """Each role can do everything the ones before it can."""

    READ = "read"
    WRITE = "write"
    ADMIN = "admin"

    @property
    def rank(self) -> int:
        return _RANK[self]

    def allows(self, required: Role) -> bool:
        return self.rank >= required.rank


_RANK = {Role.READ: 0, Role.WRITE: 1, Role.ADMIN: 2}


@dataclass(frozen=True, slots=True)
class Principal:
    """Who a request speaks for: one tenant, or every tenant (`tenant_id` None: an operator key)."""

    tenant_id: str | None
    role: Role
    # None when authentication is disabled (MEMSTREAM_AUTH=disabled).
    key_id: str | None = None

    @property
    def is_operator(self) -> bool:
        return self.tenant_id is None


# What a request is when MEMSTREAM_AUTH=disabled: an operator, as before keys existed.
UNAUTHENTICATED_OPERATOR = Principal(tenant_id=None, role=Role.ADMIN)


def new_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(_KEY_BYTES)


def new_key_id() -> str:
    """What `memstream keys revoke` takes: short, random, unrelated to the key."""
    return secrets.token_hex(8)


def hint(key: str) -> str:
    return key[:HINT_CHARS]


def looks_like_key(presented: str) -> bool:
    """Cheap shape check, so junk never costs a hash or a database lookup."""
    return presented.startswith(KEY_PREFIX) and len(presented) <= MAX_KEY_CHARS and presented.isascii()


def key_hash(secret: bytes, key: str) -> bytes:
    return hmac.new(secret, key.encode("ascii"), hashlib.sha256).digest()
