"""AWS Signature V4 as the Kafka store checks it (ops/s3auth.py): AWS's own examples, and what is refused."""

from __future__ import annotations

import calendar
import os
import stat
import time
from pathlib import Path

import pytest

from ops.s3auth import (
    EMPTY_SHA256,
    Credentials,
    SignatureError,
    Verifier,
    canonical_query,
    canonical_uri,
    load_credentials,
    sign,
)

# The key pair and time of AWS's SigV4 examples for S3 (docs: "Signature Calculations for the Authorization Header").
AWS_EXAMPLE = Credentials("AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY")
EXAMPLE_TIME = float(calendar.timegm(time.strptime("20130524T000000Z", "%Y%m%dT%H%M%SZ")))
HOST = "examplebucket.s3.amazonaws.com"


@pytest.mark.parametrize(
    ("target", "headers", "expected"),
    [
        # GET Object with a Range header
        ("/test.txt", {"range": "bytes=0-9"}, "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"),
        # GET Bucket (list objects): the query string is part of what is signed
        ("/?max-keys=2&prefix=J", {}, "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7"),
    ],
)
def test_signatures_are_awss_own_examples(target: str, headers: dict[str, str], expected: str) -> None:
    signed = sign(AWS_EXAMPLE, "GET", target, {"host": HOST, **headers}, b"", EXAMPLE_TIME)
    assert signed["authorization"].endswith(f"Signature={expected}")
    assert Verifier(AWS_EXAMPLE).check("GET", target, signed.items(), EXAMPLE_TIME + 60) == EMPTY_SHA256


def test_canonical_forms() -> None:
    # Decoded then encoded once: how the client wrote its URL does not matter.
    assert canonical_uri("/tansu/a%20b/c~d") == canonical_uri("/tansu/a b/c%7Ed") == "/tansu/a%20b/c~d"
    assert canonical_uri("") == "/"
    assert canonical_query("prefix=a/b&list-type=2&delimiter=") == "delimiter=&list-type=2&prefix=a%2Fb"


CREDS = Credentials("MSTESTKEY", "secret-of-the-store")
NOW = 1_800_000_000.0


def signed(target: str = "/tansu/k", method: str = "PUT", body: bytes = b"x", **extra: str) -> dict[str, str]:
    named = {name.replace("_", "-"): value for name, value in extra.items()}
    return sign(CREDS, method, target, {"host": "127.0.0.1:9", **named}, body, NOW)


def refusal(method: str, target: str, headers: dict[str, str], now: float = NOW) -> str:
    with pytest.raises(SignatureError) as refused:
        Verifier(CREDS).check(method, target, headers.items(), now)
    return refused.value.code


def test_a_correct_signature_passes_and_names_the_payload() -> None:
    headers = signed(if_match='"abc"')
    assert Verifier(CREDS).check("PUT", "/tansu/k", headers.items(), NOW) == headers["x-amz-content-sha256"]


def test_what_is_refused() -> None:
    good = signed()
    assert refusal("PUT", "/tansu/k", {"host": "127.0.0.1:9"}) == "AccessDenied"
    wrong_secret = sign(Credentials(CREDS.access_key_id, "guessed"), "PUT", "/tansu/k", {"host": "h"}, b"x", NOW)
    assert refusal("PUT", "/tansu/k", wrong_secret) == "SignatureDoesNotMatch"
    other_key = sign(Credentials("SOMEONEELSE", CREDS.secret_access_key), "PUT", "/tansu/k", {"host": "h"}, b"", NOW)
    assert refusal("PUT", "/tansu/k", other_key) == "InvalidAccessKeyId"
    # Replayed on another key, another method, another query, another host: all signed.
    assert refusal("PUT", "/tansu/other", good) == "SignatureDoesNotMatch"
    assert refusal("DELETE", "/tansu/k", good) == "SignatureDoesNotMatch"
    assert refusal("PUT", "/tansu/k?x-id=PutObject", good) == "SignatureDoesNotMatch"
    assert refusal("PUT", "/tansu/k", {**good, "host": "127.0.0.1:10"}) == "SignatureDoesNotMatch"
    # A signed header changed, an x-amz-* header added unsigned, a payload hash swapped.
    assert refusal("PUT", "/tansu/k", {**signed(if_match='"a"'), "if-match": '"b"'}) == "SignatureDoesNotMatch"
    assert refusal("PUT", "/tansu/k", {**good, "x-amz-copy-source": "/tansu/secret"}) == "AccessDenied"
    assert refusal("PUT", "/tansu/k", {**good, "x-amz-content-sha256": EMPTY_SHA256}) == "SignatureDoesNotMatch"
    # 15 minutes either way, no more.
    assert Verifier(CREDS).check("PUT", "/tansu/k", good.items(), NOW + 899)
    assert refusal("PUT", "/tansu/k", good, now=NOW + 901) == "RequestTimeTooSkewed"
    assert refusal("PUT", "/tansu/k", good, now=NOW - 901) == "RequestTimeTooSkewed"


def test_unsigned_payloads_and_presigned_urls_are_refused() -> None:
    unsigned = {**signed(), "x-amz-content-sha256": "UNSIGNED-PAYLOAD"}
    assert refusal("PUT", "/tansu/k", unsigned) == "AccessDenied"
    presigned = "/tansu/k?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Signature=00"
    assert refusal("GET", presigned, {"host": "127.0.0.1:9"}) == "AccessDenied"
    basic = {"host": "h", "authorization": "AWS MSTESTKEY:c2lnbmF0dXJl"}
    assert refusal("GET", "/tansu/k", basic) == "AccessDenied"


def test_credentials_are_generated_once_private(tmp_path: Path) -> None:
    path = tmp_path / "kafka" / "credentials.json"
    first = load_credentials(path)
    assert load_credentials(path) == first
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert first.secret_access_key not in repr(first)
    os.chmod(path.parent, 0o755)  # a folder made before credentials existed is narrowed
    assert load_credentials(path) == first
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
