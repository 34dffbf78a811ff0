"""SCRAM-SHA-256/512 (RFC 5802, RFC 7677) as a Kafka broker speaks it, and the users it checks.

Pure logic and one JSON file: the gate in ops/kafka_gate.py does the I/O.
Users are stored as Kafka stores them: salt, iteration count, StoredKey and
ServerKey per mechanism, never the password, so the file cannot be used to
log in, only to check a login (it is still mode 0600: it allows an offline
guess at weak passwords).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import secrets
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from ops.kafka_acl import DEFAULT_ROLE, ROLES, WORKER

MECHANISMS = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
# Kafka's minimum is 4096; tansu's `user create` default is 8192.
ITERATIONS = 8192
_PROCESS_KEY = secrets.token_bytes(32)


class AuthFailed(Exception):
    """The client's message is malformed, names an unknown user, or proves the wrong password."""


@dataclass(frozen=True)
class Credential:
    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes

    def to_json(self) -> dict[str, str | int]:
        return {
            "salt": _b64(self.salt),
            "iterations": self.iterations,
            "stored_key": _b64(self.stored_key),
            "server_key": _b64(self.server_key),
        }

    @classmethod
    def from_json(cls, data: dict[str, str | int]) -> Credential:
        return cls(
            base64.b64decode(str(data["salt"])),
            int(data["iterations"]),
            base64.b64decode(str(data["stored_key"])),
            base64.b64decode(str(data["server_key"])),
        )


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _hmac(digest: str, key: bytes, message: bytes) -> bytes:
    return hmac.new(key, message, digest).digest()


def make_credential(
    mechanism: str, password: str, *, salt: bytes | None = None, iterations: int = ITERATIONS
) -> Credential:
    digest = MECHANISMS[mechanism]
    salt = salt if salt is not None else secrets.token_bytes(24)
    salted = hashlib.pbkdf2_hmac(digest, password.encode(), salt, iterations)
    client_key = _hmac(digest, salted, b"Client Key")
    return Credential(salt, iterations, hashlib.new(digest, client_key).digest(), _hmac(digest, salted, b"Server Key"))


def _attributes(message: str) -> dict[str, str]:
    found: dict[str, str] = {}
    for part in message.split(","):
        name, sep, value = part.partition("=")
        if not sep or len(name) != 1:
            raise AuthFailed(f"malformed SCRAM attribute {part[:20]!r}")
        found[name] = value
    return found


def _sasl_name(value: str) -> str:
    """RFC 5802 saslname: ',' and '=' arrive as '=2C' and '=3D'; any other '=' is malformed."""
    if "=" in value.replace("=2C", "").replace("=3D", ""):
        raise AuthFailed("malformed user name")
    return value.replace("=2C", ",").replace("=3D", "=")


class ScramServer:
    """One server side of one SCRAM exchange: `first()` then `final()`.

    An unknown user gets a made-up salt (the same one each time within a
    process) and fails at the proof like a wrong password, so the exchange
    does not tell which user names exist.
    """

    def __init__(self, mechanism: str, lookup: Callable[[str], Credential | None], nonce: str | None = None) -> None:
        if mechanism not in MECHANISMS:
            raise AuthFailed(f"unsupported mechanism {mechanism}")
        self.mechanism = mechanism
        self._digest = MECHANISMS[mechanism]
        self._lookup = lookup
        self._server_nonce = nonce or secrets.token_urlsafe(24)
        self.username: str | None = None
        self._credential: Credential | None = None
        self._known = False
        self._client_first_bare = ""
        self._server_first = ""
        self._nonce = ""
        self._gs2 = ""

    def first(self, message: bytes) -> bytes:
        text = message.decode("utf-8", errors="strict")
        flag, sep, rest = text.partition(",")
        authzid, sep2, bare = rest.partition(",")
        if not (sep and sep2) or flag not in ("n", "y"):
            raise AuthFailed("channel binding is not supported")
        attrs = _attributes(bare)
        if "m" in attrs or set(attrs) - {"n", "r"}:
            raise AuthFailed("SCRAM extensions (delegation tokens) are not supported")
        if "n" not in attrs or not attrs.get("r"):
            raise AuthFailed("client-first-message lacks a user or a nonce")
        self.username = _sasl_name(attrs["n"])
        if authzid and _sasl_name(authzid.removeprefix("a=")) != self.username:
            raise AuthFailed("authorization id differs from the user")
        self._gs2 = f"{flag},{authzid},"
        credential = self._lookup(self.username)
        self._known = credential is not None
        self._credential = credential or self._decoy(self.username)
        self._client_first_bare = bare
        self._nonce = attrs["r"] + self._server_nonce
        self._server_first = f"r={self._nonce},s={_b64(self._credential.salt)},i={self._credential.iterations}"
        return self._server_first.encode()

    def final(self, message: bytes) -> bytes:
        if self._credential is None:
            raise AuthFailed("client-final-message before client-first-message")
        text = message.decode("utf-8", errors="strict")
        without_proof, sep, proof_b64 = text.rpartition(",p=")
        if not sep:
            raise AuthFailed("client-final-message lacks a proof")
        attrs = _attributes(without_proof)
        if attrs.get("c") != _b64(self._gs2.encode()) or attrs.get("r") != self._nonce:
            raise AuthFailed("channel binding or nonce mismatch")
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        signature = _hmac(self._digest, self._credential.stored_key, auth_message)
        try:
            proof = base64.b64decode(proof_b64, validate=True)
        except ValueError as exc:
            raise AuthFailed("malformed proof") from exc
        if len(proof) != len(signature):
            raise AuthFailed("malformed proof")
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        matches = hmac.compare_digest(hashlib.new(self._digest, client_key).digest(), self._credential.stored_key)
        if not (matches and self._known):
            raise AuthFailed(f"invalid credentials for {self.username!r}")
        return b"v=" + base64.b64encode(_hmac(self._digest, self._credential.server_key, auth_message))

    def _decoy(self, username: str) -> Credential:
        salt = _hmac("sha256", _PROCESS_KEY, f"{self.mechanism}:{username}".encode())[:24]
        return Credential(salt, ITERATIONS, secrets.token_bytes(32), secrets.token_bytes(32))


class UserStore:
    """The users file (`{"users": {name: {mechanism: credential}}, "roles": {name: role}}`), re-read on change.

    Re-reading on change is what lets `memstream kafka-users add` take effect
    in a running gate without a restart. A user without an entry in "roles"
    (stored before roles existed) is a worker (ops/kafka_acl.py DEFAULT_ROLE):
    that is what such a user could do then.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._stamp: tuple[int, int] | None = None
        self._users: dict[str, dict[str, Credential]] = {}
        self._roles: dict[str, str] = {}

    def lookup(self, mechanism: str) -> Callable[[str], Credential | None]:
        def find(username: str) -> Credential | None:
            return self.users().get(username, {}).get(mechanism)

        return find

    def users(self) -> dict[str, dict[str, Credential]]:
        try:
            stat = self.path.stat()
        except FileNotFoundError:
            self._stamp, self._users = None, {}
            return self._users
        stamp = (stat.st_mtime_ns, stat.st_size)
        if stamp != self._stamp:
            data = json.loads(self.path.read_text() or "{}")
            self._users = {
                name: {mech: Credential.from_json(cred) for mech, cred in by_mech.items()}
                for name, by_mech in data.get("users", {}).items()
            }
            self._roles = {name: str(role) for name, role in data.get("roles", {}).items()}
            self._stamp = stamp
        return self._users

    def role(self, name: str) -> str | None:
        """The user's stored role; None when it has none (stored before roles existed)."""
        self.users()
        return self._roles.get(name)

    def effective_role(self, name: str) -> str:
        """What the gate enforces: the stored role, else DEFAULT_ROLE."""
        return self.role(name) or DEFAULT_ROLE

    def put(self, name: str, password: str, mechanisms: Iterable[str] = tuple(MECHANISMS), role: str = WORKER) -> None:
        """Add or replace a user, for every mechanism (a client may pick either), in `role`.

        The default role is the one memstream's own user needs (ops/embedded.py
        registers it with this call); a chat service's user is given its role
        by `memstream kafka-users add --role`.
        """
        if not name or "," in name or "=" in name:
            raise ValueError("a Kafka user name must be non-empty, without ',' or '='")
        if role not in ROLES:
            raise ValueError(f"a Kafka role is one of {', '.join(ROLES)}, not {role!r}")
        users = dict(self.users())
        users[name] = {mech: make_credential(mech, password) for mech in mechanisms}
        self._write(users, {**self._roles, name: role})

    def remove(self, name: str) -> bool:
        users = dict(self.users())
        if users.pop(name, None) is None:
            return False
        self._write(users, {n: r for n, r in self._roles.items() if n != name})
        return True

    def verify(self, name: str, password: str) -> bool:
        """Whether `password` is the one stored for `name` (all mechanisms agree)."""
        stored = self.users().get(name, {})
        return bool(stored) and all(
            hmac.compare_digest(
                make_credential(mech, password, salt=cred.salt, iterations=cred.iterations).stored_key,
                cred.stored_key,
            )
            for mech, cred in stored.items()
        )

    def _write(self, users: dict[str, dict[str, Credential]], roles: dict[str, str]) -> None:
        """Atomically (write + rename), mode 0600 from the start."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = {
            "users": {name: {m: c.to_json() for m, c in by_mech.items()} for name, by_mech in users.items()},
            "roles": roles,
        }
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            json.dump(data, out, indent=1)
        tmp.replace(self.path)
        self._stamp = None
