"""The Kafka store refuses every request not signed with its key pair, and changes nothing for it.

Over real HTTP on loopback against ops/s3store.py, as a local process
other than tansu would try it: no signature, a guessed secret, a signed
request carrying another body.
"""

from __future__ import annotations

import http.client
import socket
import stat
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import pytest

from ops.s3auth import Credentials, sign
from ops.s3store import make_server
from tests.integration.test_s3store import BUCKET, CREDENTIALS, Client, Reply, serve

SECRET_DATA = b'{"topics": {"chat.turns": {"partitions": 12}}}'


@pytest.fixture
def store(tmp_path: Path) -> Iterator[tuple[int, Path]]:
    root = tmp_path / "kafka"
    for port in serve(make_server(root, "127.0.0.1", 0, [BUCKET], credentials=CREDENTIALS)):
        Client(port).put("clusters/tansu/meta.json", SECRET_DATA)
        yield port, root


def unsigned(port: int, method: str, path: str, body: bytes = b"", **headers: str) -> Reply:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request(method, path, body=body, headers=headers)
    response = conn.getresponse()
    reply = Reply(response.status, {k.lower(): v for k, v in response.getheaders()}, response.read())
    conn.close()
    return reply


def error_code(reply: Reply) -> str:
    return ET.fromstring(reply.body).findtext("Code") or ""


def unchanged(port: int) -> bool:
    reply = Client(port).get("clusters/tansu/meta.json")
    return reply.status == 200 and reply.body == SECRET_DATA


def test_an_unsigned_request_is_refused_and_changes_nothing(store: tuple[int, Path]) -> None:
    port, _ = store
    key = f"/{BUCKET}/clusters/tansu/meta.json"
    attempts = [
        unsigned(port, "GET", key),
        unsigned(port, "GET", f"/{BUCKET}?list-type=2&prefix=clusters/"),
        unsigned(port, "PUT", key, b'{"topics": {}}'),
        unsigned(port, "DELETE", key),
        unsigned(
            port, "POST", f"/{BUCKET}?delete", b"<Delete><Object><Key>clusters/tansu/meta.json</Key></Object></Delete>"
        ),
        unsigned(port, "OPTIONS", key, Origin="http://evil.example", Access_Control_Request_Method="PUT"),
    ]
    assert [a.status for a in attempts] == [403] * len(attempts)
    assert {error_code(a) for a in attempts} == {"AccessDenied"}
    assert all(SECRET_DATA not in a.body for a in attempts)
    assert unchanged(port)


def test_a_request_signed_with_a_wrong_secret_is_refused_and_changes_nothing(store: tuple[int, Path]) -> None:
    port, _ = store
    guessed = Client(port, Credentials(CREDENTIALS.access_key_id, "memstream"))  # the old fixed secret
    replies = [
        guessed.get("clusters/tansu/meta.json"),
        guessed.put("clusters/tansu/meta.json", b'{"topics": {}}'),
        guessed.request("DELETE", f"/{BUCKET}/clusters/tansu/meta.json"),
    ]
    assert [r.status for r in replies] == [403, 403, 403]
    assert {error_code(r) for r in replies} == {"SignatureDoesNotMatch"}
    assert unchanged(port)


def test_a_signed_request_carrying_another_body_writes_nothing(store: tuple[int, Path]) -> None:
    port, _ = store
    path = f"/{BUCKET}/clusters/tansu/meta.json"
    headers = sign(CREDENTIALS, "PUT", path, {"host": f"127.0.0.1:{port}"}, b'{"topics": {"a": 1}}', time.time())
    forged = unsigned(port, "PUT", path, b'{"topics": {"b": 1}}', **headers)
    assert forged.status == 400
    assert error_code(forged) == "XAmzContentSHA256Mismatch"
    assert unchanged(port)


def test_a_refusal_reads_no_body(store: tuple[int, Path]) -> None:
    """A 1 GiB upload announced without a signature is answered at once, its body never waited for."""
    port, _ = store
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(
            f"PUT /{BUCKET}/big HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: {1 << 30}\r\n\r\n".encode()
        )
        sock.sendall(b"x" * 65536)
        started = time.monotonic()
        answer = sock.recv(4096)
        assert answer.startswith(b"HTTP/1.1 403"), answer[:100]
        assert time.monotonic() - started < 2


def test_the_store_folder_is_its_owners_alone(store: tuple[int, Path]) -> None:
    _, root = store
    assert stat.S_IMODE(root.stat().st_mode) == 0o700
