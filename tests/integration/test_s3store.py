"""ops/s3store.py over real HTTP on loopback, files on disk: what tansu's s3:// storage relies on.

tansu updates its cluster metadata (topics, watermarks, offsets) by
compare-and-swap on a few objects, and trusts a GET's ETag to name the
bytes it got. Plain localbucket honours neither (20 topics created together, 15
of them lost); these tests pin the store's side of it.
Listings are checked against localbucket's own answers on the same files.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import json
import statistics
import tempfile
import threading
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import ThreadingHTTPServer
from pathlib import Path
from urllib.parse import quote, urlencode

import localbucket  # type: ignore[import-untyped]
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ops.s3auth import Credentials, sign
from ops.s3listing import Listings, Page, first_component
from ops.s3store import RecentETags, make_server, sweep_temporary

BUCKET = "tansu"
CREDENTIALS = Credentials.generate()


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes

    @property
    def etag(self) -> str:
        return self.headers["etag"].strip('"')


class Client:
    """One keep-alive connection, the way tansu's client reuses them; every request signed as tansu signs it."""

    def __init__(self, port: int, credentials: Credentials = CREDENTIALS) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        self.host = f"127.0.0.1:{port}"
        self.credentials = credentials

    def __del__(self) -> None:
        self.conn.close()  # a keep-alive socket left open is a ResourceWarning, an error in this suite

    def request(self, method: str, path: str, body: bytes = b"", **headers: str) -> Reply:
        named = {"host": self.host, **{k.replace("_", "-").lower(): v for k, v in headers.items()}}
        signed = sign(self.credentials, method, path, named, body, time.time())
        self.conn.request(method, path, body=body, headers=signed)
        response = self.conn.getresponse()
        data = response.read()
        if response.will_close:
            self.conn.close()
        return Reply(response.status, {k.lower(): v for k, v in response.getheaders()}, data)

    def put(self, key: str, body: bytes, **headers: str) -> Reply:
        return self.request("PUT", f"/{BUCKET}/{quote(key)}", body, **headers)

    def get(self, key: str, **headers: str) -> Reply:
        return self.request("GET", f"/{BUCKET}/{quote(key)}", **headers)

    def list_all(self, **query: str) -> tuple[list[str], list[str]]:
        """Every key and common prefix of a ListObjectsV2, following continuation tokens."""
        keys: list[str] = []
        prefixes: list[str] = []
        token: str | None = None
        while True:
            params = {"list-type": "2", **query, **({"continuation-token": token} if token else {})}
            reply = self.request("GET", f"/{BUCKET}?{urlencode(params)}")
            assert reply.status == 200, reply.body
            root = ET.fromstring(reply.body)
            keys += [e.text or "" for e in root.iterfind("{*}Contents/{*}Key")]
            prefixes += [e.text or "" for e in root.iterfind("{*}CommonPrefixes/{*}Prefix")]
            token = root.findtext("{*}NextContinuationToken")
            if root.findtext("{*}IsTruncated") != "true":
                return keys, prefixes


def serve(server: ThreadingHTTPServer) -> Iterator[int]:
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "kafka"


@pytest.fixture
def port(root: Path) -> Iterator[int]:
    yield from serve(make_server(root, "127.0.0.1", 0, [BUCKET], credentials=CREDENTIALS))


def plain_server(root: Path) -> ThreadingHTTPServer:
    """Unmodified localbucket on the same files, for comparison."""
    handler = type("Plain", (localbucket.S3Handler,), {"data_root": root.resolve(), "log_message": lambda *_: None})
    return ThreadingHTTPServer(("127.0.0.1", 0), handler)


def md5(data: bytes) -> str:
    return hashlib.md5(data, usedforsecurity=False).hexdigest()


def test_if_match_replaces_only_the_version_it_names(port: int) -> None:
    client = Client(port)
    first = client.put("meta.json", b'{"topics": {}}')
    assert first.status == 200
    second = client.put("meta.json", b'{"topics": {"a": 1}}', If_Match=f'"{first.etag}"')
    assert second.status == 200
    stale = client.put("meta.json", b'{"topics": {"b": 1}}', If_Match=f'"{first.etag}"')
    assert stale.status == 412
    assert client.get("meta.json").body == b'{"topics": {"a": 1}}'
    assert client.put("missing.json", b"{}", If_Match=f'"{first.etag}"').status == 404
    assert client.put("meta.json", b"{}", If_None_Match="*").status == 412


@pytest.mark.parametrize(
    "path",
    [
        f"/{BUCKET}/a/../../escape.txt",
        f"/{BUCKET}/a/%2E%2E/%2e%2e/escape.txt",
        f"/{BUCKET}/a/./b",
        f"/{BUCKET}/a//b",
        f"/{BUCKET}/a/b%00c",
        f"/{BUCKET}/a/",
    ],
)
def test_a_key_that_could_leave_the_bucket_is_refused(port: int, root: Path, path: str) -> None:
    """Keys are joined without resolving links (s3store.Handler._object_path): the segments alone must keep them in."""
    client = Client(port)
    assert client.request("PUT", path, b"x").status == 400
    assert client.request("GET", path).status in (400, 404)
    written = [p for p in root.parent.rglob("*") if p.is_file() and p.name not in ("credentials.json",)]
    assert not [p for p in written if "escape" in p.name or p.name in ("b", "b\0c")], written


def test_concurrent_compare_and_swap_loses_no_update(port: int) -> None:
    """tansu's pattern on its metadata object: read, change, write If-Match, retry on 412."""
    Client(port).put("counter.json", json.dumps({"n": 0}).encode())
    threads, each = 8, 25

    def increment() -> None:
        client = Client(port)
        for _ in range(each):
            while True:
                current = client.get("counter.json")
                value = json.loads(current.body)["n"] + 1
                if client.put("counter.json", json.dumps({"n": value}).encode(), If_Match=current.etag).status == 200:
                    break

    workers = [threading.Thread(target=increment) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert json.loads(Client(port).get("counter.json").body) == {"n": threads * each}


def test_a_get_names_the_bytes_it_returned_while_the_object_is_replaced(port: int) -> None:
    writer_client = Client(port)
    writer_client.put("watermark.json", b"0")
    stop = threading.Event()

    def rewrite() -> None:
        n = 0
        while not stop.is_set():
            n += 1
            writer_client.put("watermark.json", str(n).encode() * (1 + n % 50))

    writer = threading.Thread(target=rewrite)
    writer.start()
    mismatched, reads = 0, 0
    try:
        reader = Client(port)
        deadline = time.monotonic() + 1.5
        while time.monotonic() < deadline:
            reply = reader.get("watermark.json")
            reads += 1
            mismatched += reply.etag != md5(reply.body)
    finally:
        stop.set()
        writer.join()
    assert reads > 50
    assert mismatched == 0


def test_the_etag_cache_stays_bounded_however_many_objects_are_written(
    port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """tansu writes a new key per produce request; localbucket's own cache kept every one for good."""
    cache = localbucket._etag_cache
    assert isinstance(cache, RecentETags)
    monkeypatch.setattr(cache, "limit", 20)
    client = Client(port)
    first = client.put("meta.json", b'{"v": 0}')
    for n in range(200):
        assert client.put(f"topic/partitions/0/records/{n:020d}.batch", b"x" * (n + 1)).status == 200
    assert len(cache) <= 20
    assert client.put("meta.json", b'{"v": 1}', If_Match=f'"{md5(b"other")}"').status == 412
    replaced = client.put("meta.json", b'{"v": 1}', If_Match=f'"{first.etag}"')  # its entry was dropped: re-hashed
    assert replaced.status == 200
    assert client.put("meta.json", b'{"v": 2}', If_Match=f'"{first.etag}"').status == 412
    assert client.get("meta.json").body == b'{"v": 1}'


def test_conditional_reads(port: int) -> None:
    client = Client(port)
    etag = client.put("offsets.json", b'{"offset": 7}').etag
    unchanged = client.get("offsets.json", If_None_Match=f'"{etag}"')
    assert (unchanged.status, unchanged.body, unchanged.etag) == (304, b"", etag)
    assert client.get("offsets.json", If_None_Match='"other"').body == b'{"offset": 7}'
    assert client.get("offsets.json", If_Match='"other"').status == 412
    assert client.get("offsets.json", Range="bytes=1-8").body == b'"offset"'
    assert client.get("nothing-here.json").status == 404


def test_delete_objects_removes_every_listed_key(port: int) -> None:
    client = Client(port)
    for name in ("a", "b", "c"):
        client.put(f"topics/t/{name}.batch", name.encode())
    request = (
        "<Delete><Object><Key>topics/t/a.batch</Key></Object><Object><Key>topics/t/b.batch</Key></Object>"
        "<Object><Key>topics/t/never.batch</Key></Object></Delete>"
    )
    reply = client.request("POST", f"/{BUCKET}?delete", request.encode())
    assert reply.status == 200
    deleted = {e.text for e in ET.fromstring(reply.body).iterfind("{*}Deleted/{*}Key")}
    assert deleted == {"topics/t/a.batch", "topics/t/b.batch", "topics/t/never.batch"}
    assert client.list_all(prefix="topics/") == (["topics/t/c.batch"], [])


def _tansu_like_tree(client: Client) -> None:
    """Objects laid out as tansu lays them out: a partition folder holding one object per produce."""
    client.put("clusters/c/meta.json", b"{}")
    for topic in ("chat.turns", "memory.changes", "memory.dlq"):
        for partition in range(2):
            folder = f"clusters/c/topics/{topic}/partitions/{partition:0>10}"
            client.put(f"{folder}/watermark.json", b"{}")
            for offset in range(0, 1300 if topic == "chat.turns" and partition == 1 else 30, 3):
                client.put(f"{folder}/records/{offset:0>20}.batch", b"x")
    client.put("clusters/c/groups/consumers/memstream/offsets/chat.turns/partitions/0000000001.json", b"{}")


QUERIES = [
    {"prefix": "clusters/c/topics/chat.turns/partitions/0000000001/records/"},
    {"prefix": "clusters/c/topics/chat.turns/partitions/0000000001/records"},
    {"prefix": "clusters/c/topics/chat.turns/partitions/0000000001/records/0000000000000000012"},
    {"prefix": "clusters/c/topics/chat.turns/partitions/0000000001/records/", "max-keys": "7"},
    {"prefix": "clusters/c/topics/chat.turns/partitions/0000000001/records/", "start-after": "x"},
    {
        "prefix": "clusters/c/topics/chat.turns/partitions/0000000001/records/",
        "start-after": "clusters/c/topics/chat.turns/partitions/0000000001/records/00000000000000000600.batch",
    },
    {"prefix": "clusters/c/topics/", "delimiter": "/"},
    {"prefix": "clusters/c/topics/", "delimiter": "/", "max-keys": "1"},
    {"prefix": "clusters/c/topics/memory.", "delimiter": "/"},
    {"prefix": "clusters/c/topics/memory.changes/", "max-keys": "5", "start-after": "clusters/b"},
    {"prefix": "clusters/c/topics/chat.turns/", "start-after": "clusters/c/topics/chat.turns/partitions/0000000000/z"},
    {"start-after": "clusters/c/topics/memory.changes/partitions/0000000000/records/00000000000000000012.batch"},
    {"prefix": "clusters/c/topics/", "delimiter": "."},
    {"prefix": "clusters/c/topics/", "delimiter": "partitions/", "max-keys": "2"},
    {"delimiter": "/"},
    {"max-keys": "3"},
    {"max-keys": "0"},
    {"prefix": "clusters/c/groups/"},
    {"prefix": "clusters/c/no-such-folder/"},
    {"prefix": "clusters/c/../c/topics/"},
    {"prefix": "clusters"},
    {},
]


@pytest.fixture
def plain_port_for() -> Iterator[Callable[[Path], int]]:
    """Starts plain localbucket servers on given roots; stops them after the test."""
    with contextlib.ExitStack() as servers:
        yield lambda root: servers.enter_context(contextlib.contextmanager(serve)(plain_server(root)))


@pytest.fixture(scope="module")
def listed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, int]]:
    """(ours, plain localbucket): two servers on one tansu-like tree."""
    root = tmp_path_factory.mktemp("listing")
    with contextlib.ExitStack() as servers:
        ours = servers.enter_context(
            contextlib.contextmanager(serve)(make_server(root, "127.0.0.1", 0, [BUCKET], credentials=CREDENTIALS))
        )
        plain = servers.enter_context(contextlib.contextmanager(serve)(plain_server(root)))
        _tansu_like_tree(Client(ours))
        yield ours, plain


@pytest.mark.parametrize("query", QUERIES, ids=[json.dumps(q) for q in QUERIES])
def test_listings_are_localbuckets_on_the_same_files(listed: tuple[int, int], query: dict[str, str]) -> None:
    """Walking only the prefix's folder changes the cost of a listing, never its answer (paging included)."""
    ours, plain = listed
    assert Client(ours).list_all(**query) == Client(plain).list_all(**query)


@pytest.mark.parametrize(("rest", "component"), [("a/b/c", "a/"), ("abc", "abc"), ("a/", "a/"), ("", "")])
def test_first_component(rest: str, component: str) -> None:
    assert first_component(rest) == component


def test_listings_follow_writes_and_deletes(port: int, plain_port_for: Callable[[Path], int], root: Path) -> None:
    """The in-memory view is built at the first listing; every later write and delete must show in it."""
    ours = Client(port)
    _tansu_like_tree(ours)
    everything = ours.list_all()
    folder = "clusters/c/topics/memory.dlq/partitions/0000000000/records/"
    ours.put(f"{folder}00000000000000000001.batch", b"new")
    ours.put("clusters/c/topics/new.topic/partitions/0000000000/records/00000000000000000000.batch", b"new")
    ours.put("clusters/c/meta.json", b'{"changed": true}')
    ours.request("DELETE", f"/{BUCKET}/{quote(folder)}00000000000000000003.batch")
    for n in range(0, 30, 3):  # empties a partition: localbucket removes the emptied folders
        ours.request("DELETE", f"/{BUCKET}/clusters/c/topics/memory.dlq/partitions/0000000001/records/{n:0>20}.batch")
    bulk = "".join(f"<Object><Key>{folder}{n:0>20}.batch</Key></Object>" for n in (6, 9, 99))
    ours.request("POST", f"/{BUCKET}?delete", f"<Delete>{bulk}</Delete>".encode())
    plain = Client(plain_port_for(root))
    for query in [{}, {"prefix": folder}, {"prefix": "clusters/c/topics/", "delimiter": "/"}, {"max-keys": "50"}]:
        assert ours.list_all(**query) == plain.list_all(**query)
    assert ours.list_all() != everything


def test_small_replies_do_not_wait_for_delayed_acks(port: int) -> None:
    """Headers and body go out as two writes: without TCP_NODELAY each small GET stalls ~40 ms."""
    client = Client(port)
    client.put("clusters/c/meta.json", b"{}" * 10)
    took = []
    for _ in range(30):
        started = time.perf_counter()
        assert client.get("clusters/c/meta.json").status == 200
        took.append(time.perf_counter() - started)
    assert statistics.median(took) < 0.02, f"median GET {statistics.median(took) * 1000:.1f} ms"


def test_a_killed_servers_temporary_files_are_swept(tmp_path: Path) -> None:
    folder = tmp_path / BUCKET / "clusters" / "c"
    folder.mkdir(parents=True)
    (folder / "meta.json").write_bytes(b"{}")
    (folder / f"{localbucket.TEMP_PREFIX}half-written").write_bytes(b"{")
    uploads = tmp_path / localbucket.UPLOADS_DIR / ("0" * 32)
    uploads.mkdir(parents=True)
    (uploads / f"{localbucket.TEMP_PREFIX}part").write_bytes(b"p")
    assert sweep_temporary(tmp_path) == 1
    assert [p.name for p in folder.iterdir()] == ["meta.json"]
    assert (uploads / f"{localbucket.TEMP_PREFIX}part").exists(), "multipart uploads are localbucket's own"


_SEGMENT = st.text(alphabet="ab-.", min_size=1, max_size=3).filter(lambda s: s not in (".", ".."))
_KEYS = st.lists(st.lists(_SEGMENT, min_size=1, max_size=3).map("/".join), min_size=1, max_size=25, unique=True)
_QUERY = st.text(alphabet="ab-./", max_size=6)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    keys=_KEYS,
    prefix=_QUERY,
    delimiter=st.sampled_from(["", "/", "-", "b/"]),
    marker=_QUERY,
    max_keys=st.integers(0, 4),
)
def test_pages_are_localbuckets_for_any_tree(
    keys: list[str], prefix: str, delimiter: str, marker: str, max_keys: int
) -> None:
    """Every page, followed to the end through its continuation markers, equals localbucket's own walk."""
    files = [k for k in keys if not any(other.startswith(k + "/") for other in keys)]
    with tempfile.TemporaryDirectory() as tmp:
        bucket = Path(tmp)
        for key in files:
            (bucket / key).parent.mkdir(parents=True, exist_ok=True)
            (bucket / key).write_bytes(b"x")
        listings = Listings(lambda _: "")

        def pages(list_entries: Callable[..., Page]) -> list[Page]:
            out, mark, is_prefix = [], marker, False
            while len(out) < 50:
                page = list_entries(bucket, prefix, delimiter, mark, is_prefix, max_keys)
                out.append(([(key, str(path)) for key, path in page[0]], *page[1:]))
                if not page[2]:
                    return out
                mark, is_prefix = page[3][2:], page[3].startswith("P:")
            return out

        theirs = pages(lambda *args: localbucket.S3Handler._list_entries(None, *args))
        assert pages(listings.page) == theirs
