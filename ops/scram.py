"""SCRAM-SHA-256/512 (RFC 5802, RFC 7677) for the Kafka gate: the users it checks, and one exchange's server side.

The SCRAM itself (salted keys, message parsing, proofs, signatures) is the
scramp library's. What is ours:
- the users file: salt, iteration count, StoredKey and ServerKey per
  mechanism, as Kafka stores them, never the password, so the file cannot
  be used to log in, only to check a login (it is still mode 0600: it
  allows an offline guess at weak passwords). These are exactly the four
  values scramp's server asks for, so files written before scramp was used
  still verify unchanged;
- an unknown user gets a decoy salt and fails at the proof like a wrong
  password, so the exchange does not tell which user names exist;
- names and passwords that SASLprep (RFC 4013) would change are refused.
  scramp prepares a password before deriving its keys, as RFC 5802 asks;
  Kafka's clients (aiokafka, librdkafka, the Java client) do not. For a
  password that preparation changes, the stored keys would never match
  what a client proves, so such a user is refused when it is added.
"""

from __future__ import annotations

import base64
import hmac
import json
import os
import secrets
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from scramp import ScramException, ScramMechanism  # type: ignore[import-untyped]
from scramp.utils import ServerError, saslprep  # type: ignore[import-untyped]

from ops.kafka_acl import DEFAULT_ROLE, ROLES, WORKER

MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
# Kafka's minimum is 4096; tansu's `user create` default is 8192.
ITERATIONS = 8192
_SCRAMP = {name: ScramMechanism(name) for name in MECHANISMS}
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

    def auth_info(self) -> tuple[bytes, bytes, bytes, int]:
        """What scramp's server asks of a user: (salt, StoredKey, ServerKey, iteration count)."""
        return self.salt, self.stored_key, self.server_key, self.iterations


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _refuse_if_prepared(value: str, what: str) -> None:
    """Refuse `value` unless SASLprep leaves it as it is (see the module's docstring)."""
    try:
        prepared = saslprep(value)
    except ScramException as exc:
        raise ValueError(f"this {what} cannot be used with SCRAM: {exc}") from None
    if prepared != value:
        raise ValueError(
            f"this {what} changes under SASLprep (RFC 4013), which Kafka clients do not apply:"
            " avoid unusual spaces, invisible characters and compatibility forms (NFKC)"
        )


def make_credential(
    mechanism: str, password: str, *, salt: bytes | None = None, iterations: int = ITERATIONS
) -> Credential:
    """The stored keys for `password` (a new random salt unless given); ValueError when it cannot be stored."""
    _refuse_if_prepared(password, "password")
    try:
        salt_, stored_key, server_key, count = _SCRAMP[mechanism].make_auth_info(
            password, iteration_count=iterations, salt=salt
        )
    except ScramException as exc:
        raise ValueError(f"no {mechanism} credential: {exc}") from None
    return Credential(bytes(salt_), int(count), bytes(stored_key), bytes(server_key))


def _decoy(mechanism: str, username: str) -> Credential:
    """A credential nobody can prove, with a salt that is the same for a name each time within a process."""
    salt = hmac.new(_PROCESS_KEY, f"{mechanism}:{username}".encode(), "sha256").digest()[:24]
    return Credential(salt, ITERATIONS, secrets.token_bytes(64), secrets.token_bytes(64))


class ScramServer:
    """One server side of one SCRAM exchange: `first()` then `final()`, each raising AuthFailed when it fails.

    `username` is set once the client's first message named one. A users
    file that cannot be read is not an authentication failure: that error
    propagates as it is.
    """

    def __init__(self, mechanism: str, lookup: Callable[[str], Credential | None], nonce: str | None = None) -> None:
        if mechanism not in _SCRAMP:
            raise AuthFailed(f"unsupported mechanism {mechanism}")
        self.mechanism = mechanism
        self.username: str | None = None
        self._lookup = lookup
        self._known = False
        self._lookup_error: Exception | None = None
        try:
            self._server = _SCRAMP[mechanism].make_server(self._auth_info, s_nonce=nonce)
        except ScramException as exc:
            raise AuthFailed(str(exc)) from None

    def _auth_info(self, username: str) -> tuple[bytes, bytes, bytes, int]:
        self.username = username
        try:
            credential = self._lookup(username)
        except Exception as exc:
            self._lookup_error = exc
            raise
        self._known = credential is not None
        return (credential or _decoy(self.mechanism, username)).auth_info()

    def first(self, message: bytes) -> bytes:
        try:
            self._server.set_client_first(message.decode("utf-8", errors="strict"))
            return str(self._server.get_server_first()).encode()
        except (ScramException, UnicodeDecodeError) as exc:
            if self._lookup_error is not None:
                raise self._lookup_error from None
            raise AuthFailed(str(exc)) from None

    def final(self, message: bytes) -> bytes:
        try:
            self._server.set_client_final(message.decode("utf-8", errors="strict"))
            answer = str(self._server.get_server_final())
        except (ScramException, UnicodeDecodeError) as exc:
            if getattr(exc, "server_error", None) is ServerError.INVALID_PROOF:
                raise AuthFailed(f"invalid credentials for {self.username!r}") from None
            raise AuthFailed(str(exc)) from None
        if not self._known:  # a decoy's random keys cannot be proved; refused here all the same
            raise AuthFailed(f"invalid credentials for {self.username!r}")
        return answer.encode()


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

    def put(self, name: str, password: str, mechanisms: Iterable[str] = MECHANISMS, role: str = WORKER) -> None:
        """Add or replace a user, for every mechanism (a client may pick either), in `role`.

        The default role is the one memstream's own user needs
        (ops/embedded/broker.py registers it with this call); a chat
        service's user is given its role by `memstream kafka-users add --role`.
        """
        if not name or "," in name or "=" in name:
            raise ValueError("a Kafka user name must be non-empty, without ',' or '='")
        _refuse_if_prepared(name, "user name")
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
        try:
            return bool(stored) and all(
                hmac.compare_digest(
                    make_credential(mech, password, salt=cred.salt, iterations=cred.iterations).stored_key,
                    cred.stored_key,
                )
                for mech, cred in stored.items()
            )
        except (ValueError, KeyError):  # a password we would not store, or a mechanism we do not know
            return False

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
