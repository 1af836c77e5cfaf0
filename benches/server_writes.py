"""Rows a second into Milvus Lite 2.5.1 and into a standalone Milvus server, side by side.

    MEMSEARCH_TEST_MILVUS_SERVER=/path/to/milvus-server python -m benches.server_writes [--rows 60000]

The only standalone Milvus that installs offline here is PyPI's ``milvus``
2.3.5 (``pip install milvus==2.3.5`` in a venv of its own), which the index
refuses (no BM25, so no hybrid search). Its write rate is still the nearest
measured stand-in for a Milvus 2.5 server on the same machine: the same
insert path (proxy, data node, segments flushed to local storage), which a
BM25 function adds work to. Both engines get the same rows, written as the
index writes them: 384-d float vectors, a content field of about 700 bytes
(a chunk's size in the generated corpora), ids of 16 hex digits, batches of
1,000, then one flush; timed from the first insert to the flush's return.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from tests.test_milvus_server import _PORTS, _free_ports

DIM = 384
BATCH = 1000


def _rows(n: int, seed: int) -> list[list[dict[str, Any]]]:
    rng = random.Random(seed)
    vectors = np.random.default_rng(seed).standard_normal((n, DIM)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    words = "cache queue deploy gateway rollout index vector shard replica search token budget".split()
    batches, batch = [], []
    for i in range(n):
        text = " ".join(rng.choice(words) for _ in range(100))[:700]
        batch.append({"id": f"{i:016x}", "vector": vectors[i].tolist(), "content": text})
        if len(batch) == BATCH:
            batches.append(batch)
            batch = []
    if batch:
        batches.append(batch)
    return batches


def _write(uri: str, batches: list[list[dict[str, Any]]]) -> dict[str, Any]:
    from pymilvus import DataType, MilvusClient

    client = MilvusClient(uri=uri)
    try:
        schema = client.create_schema(auto_id=False)
        schema.add_field("id", DataType.VARCHAR, is_primary=True, max_length=64)
        schema.add_field("vector", DataType.FLOAT_VECTOR, dim=DIM)
        schema.add_field("content", DataType.VARCHAR, max_length=65535)
        index = client.prepare_index_params()
        index.add_index("vector", index_type="FLAT", metric_type="COSINE")
        client.create_collection("bench", schema=schema, index_params=index)
        started = time.perf_counter()
        for batch in batches:
            client.insert("bench", batch)
        client.flush("bench")
        seconds = time.perf_counter() - started
        rows = sum(len(b) for b in batches)
        return {"rows": rows, "seconds": round(seconds, 2), "rows_per_s": round(rows / seconds, 1)}
    finally:
        client.close()


def _server(command: str, data: Path) -> tuple[subprocess.Popen[bytes], str]:
    import socket

    ports = _free_ports(len(_PORTS) + 1)
    argv = [command, "--data", str(data)]
    for flag, port in zip(_PORTS, ports[:-1], strict=True):
        argv += [flag, str(port)]
    env = dict(os.environ, METRICS_PORT=str(ports[-1]))
    log = (data / "server.out").open("wb")
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"milvus-server exited at start; see {data / 'server.out'}")
        try:
            socket.create_connection(("127.0.0.1", ports[0]), timeout=1).close()
            return proc, f"http://127.0.0.1:{ports[0]}"
        except OSError:
            time.sleep(0.5)
    raise SystemExit("milvus-server did not listen within 120 s")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=60_000)
    args = parser.parse_args(argv)
    command = os.environ.get("MEMSEARCH_TEST_MILVUS_SERVER")
    if not command:
        raise SystemExit("set MEMSEARCH_TEST_MILVUS_SERVER to a milvus-server command (pip install milvus==2.3.5)")
    batches = _rows(args.rows, seed=1)
    print(json.dumps({"machine": platform.processor() or platform.machine(), "cpus": os.cpu_count()}))
    with tempfile.TemporaryDirectory(prefix="server-writes-") as tmp:
        work = Path(tmp)
        lite = {"engine": "milvus-lite 2.5.1 (its engine process)", **_write(str(work / "lite.db"), batches)}
        print(json.dumps({"load_1m": round(os.getloadavg()[0], 2), **lite}), flush=True)
        (work / "server").mkdir()
        proc, uri = _server(command, work / "server")
        try:
            server = {"engine": "milvus 2.3.5 standalone", **_write(uri, batches)}
            print(json.dumps({"load_1m": round(os.getloadavg()[0], 2), **server}), flush=True)
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=60)


if __name__ == "__main__":
    main()
