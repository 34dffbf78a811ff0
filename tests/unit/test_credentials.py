"""Credentials as pure logic: client options, SCRAM, the users file, the Postgres password file and pg_hba rules."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
import stat
from pathlib import Path

import pytest
import yaml
from psycopg.conninfo import conninfo_to_dict
from pydantic import ValidationError

from ops.embedded.postgres import hba_trusts, hba_without_trust
from ops.kafka_gate import authenticate_response, handshake_response
from ops.scram import MECHANISMS, AuthFailed, Credential, ScramServer, UserStore, make_credential
from services.core.config import Settings
from services.core.kafka_auth import aiokafka_kwargs, confluent_config, faust_credentials
from services.core.pgpass import passfile_path, read_password, with_passfile, write_passfile

ROOT = Path(__file__).resolve().parents[2]
SASL = {"kafka_sasl_mechanism": "SCRAM-SHA-512", "kafka_sasl_username": "chat", "kafka_sasl_password": "s3cret-pw"}


# --- client options (services/core/kafka_auth.py) ---


def test_without_a_mechanism_no_client_gets_sasl_options(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path)
    assert aiokafka_kwargs(settings) == {}
    assert confluent_config(settings) == {}
    assert faust_credentials(settings) is None


def test_every_client_library_gets_the_same_user_and_mechanism(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, **SASL)
    assert aiokafka_kwargs(settings) == {
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "chat",
        "sasl_plain_password": "s3cret-pw",
    }
    assert confluent_config(settings) == {
        "security.protocol": "sasl_plaintext",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "chat",
        "sasl.password": "s3cret-pw",
    }
    credentials = faust_credentials(settings)
    assert credentials is not None
    assert (credentials.username, credentials.password, credentials.mechanism.value) == (
        "chat",
        "s3cret-pw",
        "SCRAM-SHA-512",
    )
    assert credentials.protocol.value == "SASL_PLAINTEXT"


def test_the_password_never_shows_in_the_settings_repr(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, **SASL)
    assert "s3cret-pw" not in repr(settings)
    assert "s3cret-pw" not in str(settings.model_dump())


@pytest.mark.parametrize("missing", ["kafka_sasl_username", "kafka_sasl_password"])
def test_a_mechanism_without_user_or_password_is_refused_at_start(tmp_path: Path, missing: str) -> None:
    given = {k: v for k, v in SASL.items() if k != missing}
    with pytest.raises(ValidationError, match="MEMSTREAM_KAFKA_SASL_USERNAME"):
        Settings(data_dir=tmp_path, **given)


def test_the_settings_come_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMSTREAM_KAFKA_SASL_MECHANISM", "SCRAM-SHA-256")
    monkeypatch.setenv("MEMSTREAM_KAFKA_SASL_USERNAME", "memstream")
    monkeypatch.setenv("MEMSTREAM_KAFKA_SASL_PASSWORD", "from-env")
    settings = Settings(data_dir=tmp_path)
    assert confluent_config(settings)["sasl.password"] == "from-env"
    assert confluent_config(settings)["sasl.mechanism"] == "SCRAM-SHA-256"


# --- SCRAM (ops/scram.py) ---


def _client_proof(mechanism: str, password: str, salt: bytes, iterations: int, auth_message: bytes) -> bytes:
    digest = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}[mechanism]
    salted = hashlib.pbkdf2_hmac(digest, password.encode(), salt, iterations)
    client_key = hmac.new(salted, b"Client Key", digest).digest()
    signature = hmac.new(hashlib.new(digest, client_key).digest(), auth_message, digest).digest()
    return bytes(a ^ b for a, b in zip(client_key, signature, strict=True))


def _login(server: ScramServer, user: str, password: str, nonce: str = "cnonce123") -> bytes:
    first_bare = f"n={user},r={nonce}"
    server_first = server.first(f"n,,{first_bare}".encode()).decode()
    fields = dict(part.split("=", 1) for part in server_first.split(","))
    without_proof = f"c=biws,r={fields['r']}"
    auth_message = f"{first_bare},{server_first},{without_proof}".encode()
    proof = _client_proof(server.mechanism, password, base64.b64decode(fields["s"]), int(fields["i"]), auth_message)
    return server.final(f"{without_proof},p={base64.b64encode(proof).decode()}".encode())


def test_scram_sha_256_matches_the_rfc_7677_example() -> None:
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    credential = make_credential("SCRAM-SHA-256", "pencil", salt=salt, iterations=4096)
    server = ScramServer("SCRAM-SHA-256", {"user": credential}.get, nonce="%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0")
    first = server.first(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO")
    assert first == b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    final = server.final(
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
    )
    assert final == b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    assert server.username == "user"


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_the_right_password_passes_and_a_wrong_one_fails(mechanism: str) -> None:
    users = {"chat": make_credential(mechanism, "right", iterations=4096)}
    assert _login(ScramServer(mechanism, users.get), "chat", "right").startswith(b"v=")
    with pytest.raises(AuthFailed, match="invalid credentials"):
        _login(ScramServer(mechanism, users.get), "chat", "wrong")


def test_an_unknown_user_fails_at_the_proof_like_a_wrong_password_with_a_stable_salt() -> None:
    lookup: dict[str, Credential] = {}
    first_a = ScramServer("SCRAM-SHA-256", lookup.get).first(b"n,,n=ghost,r=abc").decode()
    first_b = ScramServer("SCRAM-SHA-256", lookup.get).first(b"n,,n=ghost,r=abc").decode()
    assert re.findall(r",s=([^,]+),", first_a) == re.findall(r",s=([^,]+),", first_b) != []
    with pytest.raises(AuthFailed, match="invalid credentials"):
        _login(ScramServer("SCRAM-SHA-256", lookup.get), "ghost", "anything")


def test_escaped_user_names_are_decoded() -> None:
    users = {"a,b=c": make_credential("SCRAM-SHA-256", "pw", iterations=4096)}
    server = ScramServer("SCRAM-SHA-256", users.get)
    assert _login(server, "a=2Cb=3Dc", "pw").startswith(b"v=")
    assert server.username == "a,b=c"


@pytest.mark.parametrize(
    "message",
    [
        b"p=tls-unique,,n=u,r=x",  # channel binding
        b"n,,n=u",  # no nonce
        b"n,,r=x",  # no user
        b"n,,m=ext,n=u,r=x",  # mandatory extension
        b"n,,n=u,r=x,tokenauth=true",  # delegation token
        b"n,a=other,n=u,r=x",  # authorization id of another user
        b"garbage",
    ],
)
def test_malformed_or_unsupported_first_messages_are_refused(message: bytes) -> None:
    with pytest.raises(AuthFailed):
        ScramServer("SCRAM-SHA-256", {}.get).first(message)


def test_a_replayed_final_message_with_another_nonce_is_refused() -> None:
    users = {"u": make_credential("SCRAM-SHA-256", "pw", iterations=4096)}
    server = ScramServer("SCRAM-SHA-256", users.get)
    server.first(b"n,,n=u,r=abc")
    with pytest.raises(AuthFailed, match="nonce"):
        server.final(b"c=biws,r=abcSOMETHINGELSE,p=AAAA")


def _kafka_style_keys(mechanism: str, password: str, salt: bytes, iterations: int) -> dict[str, str | int]:
    """A stored credential derived as Kafka derives it (plain UTF-8 password, no SASLprep), in the file's format."""
    digest = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}[mechanism]
    salted = hashlib.pbkdf2_hmac(digest, password.encode(), salt, iterations)
    client_key = hmac.new(salted, b"Client Key", digest).digest()
    stored, server = hashlib.new(digest, client_key).digest(), hmac.new(salted, b"Server Key", digest).digest()
    encoded = {"salt": salt, "stored_key": stored, "server_key": server}
    return {"iterations": iterations, **{name: base64.b64encode(value).decode() for name, value in encoded.items()}}


def test_a_users_file_written_before_keeps_verifying_and_logging_in(tmp_path: Path) -> None:
    """The file format did not change: keys derived independently of the library still check out."""
    path = tmp_path / "kafka-users.json"
    by_mech = {m: _kafka_style_keys(m, "old-pw", b"0123456789abcdef01234567", 8192) for m in MECHANISMS}
    path.write_text(json.dumps({"users": {"chat": by_mech}, "roles": {"chat": "producer"}}))
    store = UserStore(path)
    assert store.verify("chat", "old-pw")
    assert not store.verify("chat", "new-pw")
    for mechanism in MECHANISMS:
        assert _login(ScramServer(mechanism, store.lookup(mechanism)), "chat", "old-pw").startswith(b"v=")
    store.put("chat", "new-pw", role="producer")  # written again in the same format
    assert set(json.loads(path.read_text())["users"]["chat"]["SCRAM-SHA-512"]) == set(by_mech["SCRAM-SHA-512"])


@pytest.mark.parametrize("password", ["pass\u00a0word", "bell\x07", "\ufb01le"])
def test_a_password_kafka_clients_would_prove_differently_is_refused(tmp_path: Path, password: str) -> None:
    """SASLprep would change these (a no-break space, a control character, a ligature); Kafka clients do not."""
    store = UserStore(tmp_path / "kafka-users.json")
    with pytest.raises(ValueError, match=r"SASLprep|cannot be used"):
        store.put("chat", password)
    assert not store.verify("chat", password)
    store.put("chat", "pässwörd")  # ordinary Unicode is fine
    assert store.verify("chat", "pässwörd")
    assert _login(ScramServer("SCRAM-SHA-256", store.lookup("SCRAM-SHA-256")), "chat", "pässwörd").startswith(b"v=")


def test_an_unreadable_users_file_is_not_taken_for_a_failed_login() -> None:
    def broken(_: str) -> Credential | None:
        raise OSError("users file unreadable")

    with pytest.raises(OSError, match="unreadable"):
        ScramServer("SCRAM-SHA-256", broken).first(b"n,,n=chat,r=abc")


def test_the_users_file_is_private_keeps_no_password_and_is_reread_when_changed(tmp_path: Path) -> None:
    path = tmp_path / "kafka-users.json"
    store = UserStore(path)
    store.put("chat", "pw-1")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert "pw-1" not in path.read_text()
    assert store.verify("chat", "pw-1")
    assert not store.verify("chat", "pw-2")
    reader = UserStore(path)  # another process, e.g. the running gate
    assert set(reader.users()["chat"]) == {"SCRAM-SHA-256", "SCRAM-SHA-512"}
    UserStore(path).put("other", "x")
    assert set(reader.users()) == {"chat", "other"}
    assert UserStore(path).remove("chat")
    assert reader.lookup("SCRAM-SHA-256")("chat") is None
    assert not UserStore(path).remove("chat")
    with pytest.raises(ValueError, match="user name"):
        store.put("a,b", "pw")


# --- the gate's responses (ops/kafka_gate.py) ---


def test_handshake_and_authenticate_responses_are_encoded_as_kafka_expects() -> None:
    from aiokafka.protocol.admin import (
        SaslAuthenticateResponse_v0,
        SaslAuthenticateResponse_v1,
        SaslHandShakeResponse_v1,
    )

    handshake = SaslHandShakeResponse_v1.decode(handshake_response(7, 0)[4:])
    assert (handshake.error_code, handshake.enabled_mechanisms) == (0, ["SCRAM-SHA-256", "SCRAM-SHA-512"])
    v0 = SaslAuthenticateResponse_v0.decode(authenticate_response(7, 0, 58, "no", b"")[4:])
    assert (v0.error_code, v0.error_message, v0.sasl_auth_bytes) == (58, "no", b"")
    v1 = SaslAuthenticateResponse_v1.decode(authenticate_response(7, 1, 0, None, b"v=abc")[4:])
    assert (v1.error_code, v1.error_message, v1.sasl_auth_bytes, v1.session_lifetime_ms) == (0, None, b"v=abc", 0)
    v2 = authenticate_response(7, 2, 0, None, b"v=abc")
    # correlation id, empty header tags, error 0, null message, compact bytes (len+1), lifetime, empty tags
    assert v2 == b"\x00\x00\x00\x07" + b"\x00" + b"\x00\x00" + b"\x00" + b"\x06v=abc" + b"\x00" * 8 + b"\x00"


# --- the Postgres password file (services/core/pgpass.py) and pg_hba.conf rules (ops/embedded/postgres.py) ---


def test_the_password_file_is_private_and_scoped_to_one_server_and_user(tmp_path: Path) -> None:
    path = passfile_path(tmp_path)
    write_passfile(path, "127.0.0.1", 5433, "memstream", "Zm9v-bar_baz")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.read_text() == "127.0.0.1:5433:*:memstream:Zm9v-bar_baz\n"
    assert read_password(path) == "Zm9v-bar_baz"
    assert read_password(tmp_path / "missing") is None
    with pytest.raises(ValueError, match="never holds"):
        write_passfile(path, "h", 1, "u", "a:b")


def test_a_dsn_names_the_password_file_only_when_it_exists_and_the_dsn_has_none(tmp_path: Path) -> None:
    dsn = "postgresql://memstream@127.0.0.1:5433/memstream"
    assert with_passfile(dsn, tmp_path) == dsn
    write_passfile(passfile_path(tmp_path), "127.0.0.1", 5433, "memstream", "pw")
    named = conninfo_to_dict(with_passfile(dsn, tmp_path))
    assert named["passfile"] == str(passfile_path(tmp_path).resolve())
    assert "pw" not in with_passfile(dsn, tmp_path).replace(str(tmp_path), "")
    explicit = "postgresql://memstream:given@127.0.0.1:5433/memstream"
    assert with_passfile(explicit, tmp_path) == explicit
    assert with_passfile(with_passfile(dsn, tmp_path), tmp_path) == with_passfile(dsn, tmp_path)
    # Settings do the same for every process that reads MEMSTREAM_* (app, CLI, tests).
    assert conninfo_to_dict(Settings(data_dir=tmp_path).pg_dsn)["passfile"] == str(passfile_path(tmp_path).resolve())


def test_trust_rules_become_scram_and_nothing_else_changes() -> None:
    hba = (
        "# TYPE  DATABASE USER ADDRESS METHOD\n"
        "# a comment mentioning trust stays\n"
        "local   all      all          trust\n"
        "host    all      all  127.0.0.1/32 trust\n"
        "host    all      all  ::1/128      scram-sha-256\n"
        "local   replication all        trust  # old default\n"
    )
    assert hba_trusts(hba)
    fixed = hba_without_trust(hba)
    assert not hba_trusts(fixed)
    assert fixed.splitlines()[:2] == hba.splitlines()[:2]
    assert fixed.splitlines()[2] == "local   all      all          scram-sha-256"
    assert fixed.splitlines()[5] == "local   replication all        scram-sha-256  # old default"
    assert fixed.splitlines()[4] == hba.splitlines()[4]


# --- the compose file takes every secret from the environment, with no default ---


def test_the_compose_file_has_no_default_secrets() -> None:
    text = (ROOT / "docker-compose.yml").read_text()
    compose = yaml.safe_load(text)
    for name in ("POSTGRES_PASSWORD", "MEMSTREAM_KAFKA_SASL_PASSWORD", "CHAT_KAFKA_SASL_PASSWORD"):
        uses = re.findall(r"\$\{" + name + r"(:?[?-])?[^}]*\}", text)
        assert uses, f"{name} is not used"
        assert all(u == ":?" for u in uses), f"{name} must be required (${{{name}:?...}}), never defaulted"
    environments = [compose["x-memstream-env"], *(s.get("environment", {}) for s in compose["services"].values())]
    secrets = {k: v for env in environments for k, v in env.items() if k.endswith("PASSWORD")}
    assert secrets
    for key, value in secrets.items():
        assert re.fullmatch(r"\$\{\w+:\?[^}]*\}", str(value)), f"{key} is not taken from the environment: {value!r}"
    for service in compose["services"].values():
        assert "memstream:" not in str(service.get("environment", {}).get("MEMSTREAM_PG_DSN", ""))
