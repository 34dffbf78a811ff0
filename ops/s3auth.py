"""AWS Signature Version 4 for the embedded broker's S3 store: its credentials, signing and verifying.

Why: ops/s3store.py listens on loopback, and without credentials any local
process (another user's, or a web page's script through the browser) could
read, rewrite or delete every topic, past the Kafka SCRAM gate. tansu's S3
client (Rust object_store) signs every request with SigV4 from
AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, so the store can demand it:
a key pair generated once into the store's folder (0600, folder 0700),
given to tansu, checked on every request.

Only header-signed requests are accepted (`Authorization: AWS4-HMAC-SHA256 ...`),
as object_store sends them: no presigned URLs, no `UNSIGNED-PAYLOAD`, no
streaming chunk signatures. The signed `x-amz-content-sha256` is compared
with the body the store reads, so a signature covers method, path, query,
the signed headers (host, date and every `x-amz-*` among them) and the
payload. `x-amz-date` may be off by 15 minutes either way. Within those 15
minutes a request seen on the wire could be replayed; on loopback only root
sees the wire.

The functions below are pure (a clock is passed in); the two at the end read
and write the credentials file.
"""

from __future__ import annotations

import calendar
import hashlib
import hmac
import json
import logging
import re
import secrets
import stat
import string
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qsl, quote, unquote_to_bytes, urlsplit

from services.auth.secret import read_private, write_private
from services.core.errors import ConfigError

log = logging.getLogger("memstream.s3auth")

ALGORITHM = "AWS4-HMAC-SHA256"
SERVICE = "s3"
REGION = "us-east-1"
TERMINATOR = "aws4_request"
MAX_SKEW_SECONDS = 15 * 60
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
CREDENTIALS_FILE = "credentials.json"
# Headers a signature must cover (AWS requires the same of S3 requests).
REQUIRED_SIGNED = ("host", "x-amz-content-sha256", "x-amz-date")
# What AWS keeps unencoded in a canonical URI or query (RFC 3986 unreserved; "/" in paths).
_UNRESERVED = "-_.~"
_HEX64 = re.compile(r"[0-9a-f]{64}")
_AMZ_DATE = "%Y%m%dT%H%M%SZ"
_KEY_ID_ALPHABET = string.ascii_uppercase + string.digits

Headers = Iterable[tuple[str, str]]


@dataclass(frozen=True)
class Credentials:
    access_key_id: str
    secret_access_key: str = field(repr=False)

    @classmethod
    def generate(cls) -> Credentials:
        key_id = "MS" + "".join(secrets.choice(_KEY_ID_ALPHABET) for _ in range(18))
        return cls(key_id, secrets.token_urlsafe(30))


class SignatureError(Exception):
    """A request the store refuses (403); `code` is S3's error code for it."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def canonical_uri(path: str) -> str:
    """The path as S3 signs it: each byte outside the unreserved set percent-encoded once, "/" kept.

    Decoded first, so a client that encodes fewer characters in its URL than in its signature still matches.
    """
    return quote(unquote_to_bytes(path or "/"), safe="/" + _UNRESERVED)


def canonical_query(query: str) -> str:
    """Parameters encoded, sorted by name then value; a parameter without a value is `name=`."""
    pairs = [
        (quote(name, safe=_UNRESERVED), quote(value, safe=_UNRESERVED))
        for name, value in parse_qsl(query, keep_blank_values=True)
    ]
    return "&".join(f"{name}={value}" for name, value in sorted(pairs))


def header_values(headers: Headers) -> dict[str, str]:
    """Lower-case name -> trimmed value (inner runs of spaces collapsed); repeated headers joined with ","."""
    joined: dict[str, list[str]] = {}
    for name, value in headers:
        joined.setdefault(name.strip().lower(), []).append(" ".join(value.split()))
    return {name: ",".join(values) for name, values in joined.items()}


def canonical_request(method: str, target: str, values: dict[str, str], signed: list[str], payload_hash: str) -> str:
    url = urlsplit(target)
    headers = "".join(f"{name}:{values.get(name, '')}\n" for name in signed)
    return "\n".join(
        [method, canonical_uri(url.path), canonical_query(url.query), headers, ";".join(signed), payload_hash]
    )


def signing_key(secret: str, date: str, region: str, service: str = SERVICE) -> bytes:
    key = f"AWS4{secret}".encode()
    for part in (date, region, service, TERMINATOR):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    return key


def signature(key: bytes, amz_date: str, scope: str, canonical: str) -> str:
    to_sign = "\n".join([ALGORITHM, amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()])
    return hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()


def sign(
    credentials: Credentials,
    method: str,
    target: str,
    headers: dict[str, str],
    body: bytes,
    now: float,
    region: str = REGION,
) -> dict[str, str]:
    """`headers` (which must hold `host`) plus the date, payload hash and Authorization that sign them all."""
    amz_date = time.strftime(_AMZ_DATE, time.gmtime(now))
    payload_hash = hashlib.sha256(body).hexdigest()
    out = {**headers, "x-amz-date": amz_date, "x-amz-content-sha256": payload_hash}
    values = header_values(out.items())
    signed = sorted(values)
    scope = f"{amz_date[:8]}/{region}/{SERVICE}/{TERMINATOR}"
    canonical = canonical_request(method, target, values, signed, payload_hash)
    proof = signature(signing_key(credentials.secret_access_key, amz_date[:8], region), amz_date, scope, canonical)
    out["authorization"] = (
        f"{ALGORITHM} Credential={credentials.access_key_id}/{scope}, "
        f"SignedHeaders={';'.join(signed)}, Signature={proof}"
    )
    return out


def _parse_authorization(header: str) -> dict[str, str]:
    algorithm, _, rest = header.strip().partition(" ")
    if algorithm != ALGORITHM:
        raise SignatureError("AccessDenied", f"only {ALGORITHM} signed requests are accepted")
    fields = {}
    for part in rest.split(","):
        name, _, value = part.strip().partition("=")
        fields[name] = value
    if not {"Credential", "SignedHeaders", "Signature"} <= fields.keys():
        raise SignatureError("AuthorizationHeaderMalformed", "Credential, SignedHeaders and Signature are required")
    return fields


def _request_time(amz_date: str) -> float:
    try:
        return float(calendar.timegm(time.strptime(amz_date, _AMZ_DATE)))
    except ValueError:
        raise SignatureError("AccessDenied", "x-amz-date must be YYYYMMDDTHHMMSSZ") from None


class Verifier:
    """Checks a request's SigV4 signature against one key pair; signing keys are cached per day and region."""

    def __init__(self, credentials: Credentials, max_skew: float = MAX_SKEW_SECONDS) -> None:
        self.credentials = credentials
        self.max_skew = max_skew
        self._keys: dict[tuple[str, str], bytes] = {}

    def _key(self, date: str, region: str) -> bytes:
        key = self._keys.get((date, region))
        if key is None:
            if len(self._keys) > 8:  # old days
                self._keys.clear()
            key = self._keys[(date, region)] = signing_key(self.credentials.secret_access_key, date, region)
        return key

    def check(self, method: str, target: str, headers: Headers, now: float) -> str:
        """The request's signed payload hash (to compare with its body); SignatureError when refused."""
        values = header_values(headers)
        if "X-Amz-Signature" in urlsplit(target).query:
            raise SignatureError("AccessDenied", "presigned URLs are not accepted: sign the Authorization header")
        if "authorization" not in values:
            raise SignatureError("AccessDenied", "requests must be signed (AWS Signature Version 4)")
        fields = _parse_authorization(values["authorization"])
        parts = fields["Credential"].split("/")
        if len(parts) != 5 or parts[3] != SERVICE or parts[4] != TERMINATOR:
            raise SignatureError("AuthorizationHeaderMalformed", "Credential must be KEY/DATE/REGION/s3/aws4_request")
        key_id, date, region = parts[:3]
        if not hmac.compare_digest(key_id.encode(), self.credentials.access_key_id.encode()):
            raise SignatureError("InvalidAccessKeyId", "the access key id is not this store's")
        amz_date = values.get("x-amz-date", "")
        if abs(now - _request_time(amz_date)) > self.max_skew:
            raise SignatureError("RequestTimeTooSkewed", "the request's time is too far from the store's")
        if date != amz_date[:8]:
            raise SignatureError("AuthorizationHeaderMalformed", "the credential's date is not the request's")
        signed = fields["SignedHeaders"].split(";")
        unsigned = [n for n in values if n.startswith("x-amz-") and n not in signed]
        missing = [n for n in signed if n not in values]
        if not set(REQUIRED_SIGNED) <= set(signed) or unsigned or missing:
            raise SignatureError(
                "AccessDenied",
                "the signature must cover host, x-amz-date and every x-amz-* header sent, and only those",
            )
        payload_hash = values["x-amz-content-sha256"]
        if not _HEX64.fullmatch(payload_hash):
            raise SignatureError("AccessDenied", "x-amz-content-sha256 must be the payload's SHA-256 (hex)")
        scope = f"{date}/{region}/{SERVICE}/{TERMINATOR}"
        canonical = canonical_request(method, target, values, signed, payload_hash)
        expected = signature(self._key(date, region), amz_date, scope, canonical)
        if not hmac.compare_digest(expected.encode(), fields["Signature"].encode()):
            raise SignatureError("SignatureDoesNotMatch", "the request signature does not match")
        return payload_hash


def payload_matches(payload_hash: str, body: bytes) -> bool:
    return hmac.compare_digest(payload_hash, hashlib.sha256(body).hexdigest())


def private_dir(path: Path) -> Path:
    """`path` created if missing, and narrowed to 0700: the store's files and credentials are its owner's."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode != 0o700:
        log.info("narrowing %s from mode %o to 0700", path, mode)
        path.chmod(0o700)
    return path


def load_credentials(path: Path) -> Credentials:
    """The key pair in `path`, generated there (0600, folder 0700) the first time; concurrent callers agree."""
    private_dir(path.parent)
    fresh = Credentials.generate()
    text = json.dumps({"access_key_id": fresh.access_key_id, "secret_access_key": fresh.secret_access_key})
    if write_private(path, text + "\n", replace=False):
        log.info("generated the Kafka store's S3 credentials in %s", path)
    try:
        data = json.loads(read_private(path))
        return Credentials(str(data["access_key_id"]), str(data["secret_access_key"]))
    except (ValueError, KeyError, TypeError):
        raise ConfigError(f"{path} holds no S3 credentials: remove it to generate new ones") from None


def credentials_path(root: Path) -> Path:
    """Where the store under `root` keeps its key pair (a file, never a bucket: buckets are folders)."""
    return root / CREDENTIALS_FILE
