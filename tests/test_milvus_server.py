"""A Milvus server that cannot do BM25 (before 2.5) is refused in one line.

The server is PyPI's ``milvus`` 2.3.5, a real standalone Milvus: set
``MEMSEARCH_TEST_MILVUS_SERVER`` to its ``milvus-server`` command (``python3 -m
venv /tmp/m235 && /tmp/m235/bin/pip install milvus==2.3.5``), or have it on PATH.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.cli import make_env, one_line_error, run

_PORTS = (
    "--proxy-port",
    "--etcd-port",
    "--root-coord-port",
    "--proxy-internal-port",
    "--query-coord-port",
    "--query-node-port",
    "--index-coord-port",
    "--index-node-port",
    "--data-coord-port",
    "--data-node-port",
)


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


@pytest.fixture(scope="module")
def milvus_235(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    command = os.environ.get("MEMSEARCH_TEST_MILVUS_SERVER") or shutil.which("milvus-server")
    if not command:
        pytest.skip("no Milvus 2.3.5 server: pip install milvus==2.3.5 in a venv, set MEMSEARCH_TEST_MILVUS_SERVER")
    data = tmp_path_factory.mktemp("milvus235")
    ports = _free_ports(len(_PORTS) + 1)
    argv = [command, "--data", str(data)]
    for flag, port in zip(_PORTS, ports[:-1], strict=True):
        argv += [flag, str(port)]
    log = open(data / "server.out", "wb")  # noqa: SIM115 - closed after the server stops
    # METRICS_PORT moves its HTTP port (9091 by default), so two servers can run at once.
    env = dict(os.environ, METRICS_PORT=str(ports[-1]))
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                pytest.skip(f"milvus-server exited at start (rc {proc.returncode}); see {data / 'server.out'}")
            try:
                socket.create_connection(("127.0.0.1", ports[0]), timeout=1).close()
                break
            except OSError:
                time.sleep(0.5)
        else:
            pytest.skip("milvus-server did not listen within 120 s")
        yield f"http://127.0.0.1:{ports[0]}"
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=30)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        log.close()


@pytest.mark.slow(reason="starts a Milvus 2.3.5 server")
def test_milvus_before_2_5_is_refused_in_one_line(milvus_235: str, tmp_path: Path, model_dir: Path) -> None:
    env = make_env(tmp_path / "home")
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "a.md").write_text("# A\n\nsome text\n", encoding="utf-8")
    uri = ["--milvus-uri", milvus_235]
    model = ["-m", str(model_dir), *uri]
    for args in (
        ["index", str(notes), *model],
        ["search", "text", *model],
        ["stats", *uri],
        ["watch", str(notes), "-q", *model],
    ):
        start = time.monotonic()
        line = one_line_error(run(args, env, timeout=120), "v2.3.5", "Milvus >= 2.5", "BM25")
        assert time.monotonic() - start < 60, line  # refused, not retried
    from pymilvus import MilvusClient

    client = MilvusClient(uri=milvus_235)
    try:
        assert client.list_collections() == []  # nothing was created on it
    finally:
        client.close()


def test_server_versions() -> None:
    from memsearch_fast.store.compat import server_too_old

    assert "needs Milvus >= 2.5" in server_too_old("v2.3.5-lite")
    assert "needs Milvus >= 2.5" in server_too_old("2.4.17")
    for ok in ("v2.5.0", "2.5.4", "v2.6.1-beta", "v3.0.0", "Zilliz Cloud Vdb", "", "master-20250101"):
        assert server_too_old(ok) == "", ok
