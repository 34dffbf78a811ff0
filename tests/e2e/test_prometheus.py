"""A real Prometheus scrapes the embedded stack; every dashboard query must return series."""

from __future__ import annotations

import asyncio
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from ops import dashboard
from tests.stack import Stack, produce, session_end, turn, wait_for

pytestmark = pytest.mark.e2e
TENANT = "prom"
# Stands in for Grafana's $__rate_interval: several 1 s scrapes.
RATE_WINDOW = "1m"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture(scope="module")
def prometheus(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.skip("no `prometheus` binary: install Debian's prometheus package (.ci/run does: apt-get install)")
    workdir = Path(tmp_path_factory.mktemp("prometheus"))
    target = stack.base_url.removeprefix("http://")
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "scrape_configs": [{"job_name": "memstream", "static_configs": [{"targets": [target]}]}],
    }
    (workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = _free_port()
    log = open(workdir / "prometheus.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen(
        [
            binary,
            f"--config.file={workdir / 'prometheus.yml'}",
            f"--storage.tsdb.path={workdir / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: httpx.get(f"{url}/-/ready", timeout=2).status_code == 200, 60, "prometheus ready")
        yield url
    finally:
        proc.terminate()
        proc.wait(30)
        log.close()


def query(prometheus: str, expr: str) -> list[dict[str, Any]]:
    response = httpx.get(f"{prometheus}/api/v1/query", params={"query": expr}, timeout=10)
    response.raise_for_status()
    body = response.json()
    assert body["status"] == "success", body
    result: list[dict[str, Any]] = body["data"]["result"]
    return result


async def drive_traffic(stack: Stack) -> str:
    """Enough of everything for each panel: turns, a supersession, an episode, a DLQ hit, recalls."""
    user = f"user-{uuid.uuid4().hex[:8]}"
    await produce(
        stack.bootstrap,
        [
            turn(TENANT, user, "p1", 0, "I live in Pune and I love green tea."),
            turn(TENANT, user, "p1", 1, "Tell me about tea.", role="assistant"),
            turn(TENANT, user, "p1", 2, "I moved from Pune to Berlin last month."),
            session_end(TENANT, user, "p1"),
        ],
    )
    await produce(stack.bootstrap, [b"{not json"])
    wait_for(
        lambda: any("Berlin" in m["text"] for m in stack.recall(TENANT, user, "where do I live")["memories"]),
        60,
        "Berlin recalled",
    )
    return user


async def test_every_dashboard_query_returns_series(stack: Stack, prometheus: str) -> None:
    # Scraped before the traffic, so increase() below sees all of it.
    wait_for(lambda: query(prometheus, 'up{job="memstream"} == 1'), 60, "stack scraped")
    user = await drive_traffic(stack)
    deadline = time.monotonic() + 90
    pending = {t.expr for p in dashboard.PANELS for t in p.targets}
    while pending and time.monotonic() < deadline:
        stack.recall(TENANT, user, "what do I drink?")  # keep recall histograms moving
        pending = {e for e in pending if not query(prometheus, e.replace(dashboard.RATE, RATE_WINDOW))}
        await asyncio.sleep(1)
    assert not pending, f"dashboard queries without series: {sorted(pending)}"

    # The series are not just present: the pipeline's own work shows in them.
    ingest = query(prometheus, 'sum(increase(memstream_stage_events_in_total{stage="window"}[10m]))')
    assert float(ingest[0]["value"][1]) >= 4
    dlq = query(prometheus, 'sum(increase(memstream_dlq_messages_total{reason="invalid_json"}[10m]))')
    assert dlq
    assert float(dlq[0]["value"][1]) >= 1
    superseded = query(prometheus, 'memstream_memories{type="fact", status="superseded"}')
    assert superseded
    assert float(superseded[0]["value"][1]) >= 1
