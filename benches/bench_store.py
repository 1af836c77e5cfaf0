"""Store benchmarks: the operations indexing and search need, on the installed Milvus Lite.

Run with the engine under test installed (3.x is the Python engine, 2.5 the
C++ one); numbers land in docs/store.md::

    PYTHONPATH=python python3 -m pytest benches/bench_store.py --benchmark-enable \
        --benchmark-columns=min,median,max,rounds -q

``BENCH_ROWS`` (default 20000) sets the size of the searched index and
``BENCH_SWEEP_ROWS`` (default 10000) the rows per upsert batch-size run. Every
test reports its own numbers in ``extra_info`` (rows/s, p50 ms, RSS).
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from memsearch_fast.lite import broker as lite_broker
from memsearch_fast.lite import settings as lite_settings
from memsearch_fast.lite import state as lite_state
from memsearch_fast.store import MilvusStore
from memsearch_fast.store import milvus as store_mod

DIM = 384
ROWS = int(os.environ.get("BENCH_ROWS", "20000"))
SWEEP_ROWS = int(os.environ.get("BENCH_SWEEP_ROWS", "10000"))
CHUNKS_PER_FILE = 10
ENGINE = f"milvus-lite {importlib.metadata.version('milvus-lite')}"
PKG_ROOT = str(Path(store_mod.__file__).resolve().parents[2])  # python/

_WORDS = (
    "memory agent index search chunk vector milvus markdown embedding hybrid keyword session hook "
    "config watch file heading source line token model query result score cache server process "
    "database lock retry timeout batch flush upsert delete iterator filter prefix analyzer"
).split()
_CJK = "机器学习 数据库 索引 设计 搜索 向量 记忆 代理 会话 配置 文件 标题".split()


def make_rows(n: int, seed: int = 0, offset: int = 0) -> list[dict]:
    """Deterministic markdown-like rows (~600 chars, 1 in 10 with Chinese)."""
    rng = np.random.default_rng(seed)
    vecs = rng.standard_normal((n, DIM)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    rows = []
    for i in range(n):
        k = offset + i
        words = rng.choice(_WORDS, size=90).tolist()
        if k % 10 == 0:
            words += rng.choice(_CJK, size=10).tolist()
        rows.append(
            {
                "chunk_hash": f"{k:064x}",
                "embedding": vecs[i].tolist(),
                "content": "## Notes\n" + " ".join(words),
                "source": f"/home/u/memory/{k // CHUNKS_PER_FILE:05d}.md",
                "heading": "Notes",
                "heading_level": 2,
                "start_line": 1,
                "end_line": 12,
            }
        )
    return rows


def _rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


@pytest.fixture(scope="module")
def populated(tmp_path_factory):
    """A ROWS-row index behind a shared server; yields (db path, build numbers)."""
    db = str(tmp_path_factory.mktemp("bench") / "milvus.db")
    os.environ.pop(lite_settings.ENV_MODE, None)
    rows = make_rows(ROWS)
    t0 = time.perf_counter()
    s = MilvusStore(db, dimension=DIM)
    t1 = time.perf_counter()
    s.upsert(rows)
    t2 = time.perf_counter()
    s.flush()
    t3 = time.perf_counter()
    info = {
        "engine": ENGINE,
        "first_open_with_spawn_s": round(t1 - t0, 3),
        "upsert_rows_per_s": round(ROWS / (t2 - t1)),
        "flush_s": round(t3 - t2, 3),
        "count": s.count(),
    }
    s.close()
    yield db, info
    lite_broker.stop_server(db)


def _sources(n: int, step: int = 7) -> list[str]:
    files = ROWS // CHUNKS_PER_FILE
    return [f"/home/u/memory/{(i * step) % files:05d}.md" for i in range(n)]


# -- writes -------------------------------------------------------------------------------------


@pytest.mark.parametrize("batch", [500, 1000, 2000, 5000])
def test_upsert_batch(benchmark, tmp_path, monkeypatch, batch):
    """Upsert SWEEP_ROWS rows into an empty collection in calls of ``batch`` rows (server mode)."""
    monkeypatch.setattr(store_mod, "UPSERT_BATCH", batch)
    rows = make_rows(SWEEP_ROWS, seed=1)
    db = str(tmp_path / "m.db")
    s = MilvusStore(db, dimension=DIM)
    try:
        benchmark.pedantic(lambda: s.upsert(rows), rounds=1, iterations=1)
        benchmark.extra_info.update(
            engine=ENGINE, batch=batch, rows=SWEEP_ROWS, rows_per_s=round(SWEEP_ROWS / benchmark.stats.stats.median)
        )
        assert s.count() == SWEEP_ROWS
    finally:
        s.close()
        lite_broker.stop_server(db)


@pytest.mark.parametrize("way", ["rows", "columns"])
def test_pack_1000_rows(benchmark, populated, way):
    """The client's CPU to pack one 1,000-row insert request, pymilvus's row API
    against the column request of store/columns.py (no call is sent)."""
    from pymilvus.client.prepare import Prepare

    from memsearch_fast.store.columns import entities, input_fields

    db, _ = populated
    store = MilvusStore(db)
    try:
        client = store._client
        schema = client.describe_collection(store.collection)
        rows = make_rows(1000, seed=3)
        types = input_fields(schema)
        handler = client._get_connection()

        def by_rows():
            return handler._prepare_row_insert_request(store.collection, rows, schema=schema)

        def by_columns():
            return Prepare.batch_insert_param(store.collection, entities(rows, types), "", schema["fields"])

        request = benchmark(by_rows if way == "rows" else by_columns)
    finally:
        store.close()
    assert request.num_rows == 1000
    benchmark.extra_info.update(engine=ENGINE, way=way, ms=round(benchmark.stats.stats.median * 1000, 1))


def test_flush_after_2000(benchmark, populated):
    """Flush after upserting 2,000 new rows into the populated index."""
    db, _ = populated
    s = MilvusStore(db, dimension=DIM)
    rounds = iter(range(100))

    def setup():
        r = next(rounds)
        s.upsert(make_rows(2000, seed=50 + r, offset=10_000_000 + 2000 * r))

    try:
        benchmark.pedantic(s.flush, setup=setup, rounds=3, iterations=1)
        benchmark.extra_info["engine"] = ENGINE
    finally:
        s.close()


# -- reads ---------------------------------------------------------------------------------------


def test_iter_all_ids(benchmark, populated):
    """query_iterator over every (chunk_hash, source)."""
    db, info = populated
    s = MilvusStore(db)
    try:
        n = benchmark.pedantic(lambda: sum(1 for _ in s.iter_ids_by_source(None)), rounds=3, iterations=1)
        assert n >= ROWS
        benchmark.extra_info.update(rows=n, **info)
    finally:
        s.close()


def test_ids_by_50_sources(benchmark, populated):
    """Ids of 50 files (``source in [...]`` through the iterator)."""
    db, _ = populated
    s = MilvusStore(db)
    srcs = _sources(50)
    try:
        n = benchmark.pedantic(lambda: sum(1 for _ in s.iter_ids_by_source(srcs)), rounds=10, iterations=1)
        assert n == 50 * CHUNKS_PER_FILE
        benchmark.extra_info["engine"] = ENGINE
    finally:
        s.close()


def test_rows_for_50_sources_with_vectors(benchmark, populated):
    """Content + embeddings of 50 files, as the pipeline reads them for vector reuse."""
    db, _ = populated
    s = MilvusStore(db)
    srcs = _sources(50, step=11)
    try:
        rows = benchmark.pedantic(
            lambda: s.rows_for_sources(srcs, ["chunk_hash", "content", "embedding"]), rounds=5, iterations=1
        )
        assert len(rows) == 50 * CHUNKS_PER_FILE
        benchmark.extra_info["engine"] = ENGINE
    finally:
        s.close()


def _queries(n: int) -> list[tuple[list[float], str]]:
    rng = np.random.default_rng(7)
    vecs = rng.standard_normal((n, DIM)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    return [(vecs[i].tolist(), " ".join(rng.choice(_WORDS, size=3))) for i in range(n)]


@pytest.mark.parametrize("mode", ["server", "embedded"])
def test_hybrid_search_warm(benchmark, populated, monkeypatch, mode):
    """Warm hybrid search (top 10) through the shared server (TCP) or an in-process engine."""
    db, _ = populated
    if mode == "embedded":
        lite_broker.stop_server(db)
        monkeypatch.setenv(lite_settings.ENV_MODE, "embedded")
    s = MilvusStore(db)
    qs = _queries(40)
    for v, t in qs[:5]:
        s.search(v, t)  # warm-up: load, BM25 stats, analyzer dictionary
    it = iter(qs * 100)

    def one():
        v, t = next(it)
        return s.search(v, t, top_k=10)

    try:
        hits = benchmark.pedantic(one, rounds=40, iterations=1)
        assert len(hits) == 10
        benchmark.extra_info.update(engine=ENGINE, mode=mode, p50_ms=round(benchmark.stats.stats.median * 1000, 1))
    finally:
        s.close()


def test_dense_search_warm(benchmark, populated):
    """Warm dense-only search (empty query text) through the shared server."""
    db, _ = populated
    s = MilvusStore(db)
    qs = _queries(40)
    s.search(qs[0][0], "")
    it = iter(qs * 100)
    try:
        benchmark.pedantic(lambda: s.search(next(it)[0], "", top_k=10), rounds=40, iterations=1)
        benchmark.extra_info["engine"] = ENGINE
    finally:
        s.close()


def test_filter_query_by_source(benchmark, populated):
    """Single-file lookup by ``source ==``, the scalar-filter path."""
    db, _ = populated
    s = MilvusStore(db)
    srcs = iter(_sources(40) * 10)
    try:
        benchmark.pedantic(lambda: list(s.iter_ids_by_source([next(srcs)])), rounds=30, iterations=1)
        benchmark.extra_info["engine"] = ENGINE
    finally:
        s.close()


# -- new processes -----------------------------------------------------------------------------

_CHILD = textwrap.dedent(
    """
    import json, os, sys, time
    t0 = time.perf_counter()
    from memsearch_fast.store import MilvusStore
    t1 = time.perf_counter()
    s = MilvusStore(sys.argv[1])
    t2 = time.perf_counter()
    v = [1.0 / {dim} ** 0.5] * {dim}
    s.search(v, "memory search agent")
    t3 = time.perf_counter()
    s.search(v, "index flush")
    t4 = time.perf_counter()
    from memsearch_fast.lite import state as lite_state
    st = lite_state.read_state(sys.argv[1]) or {{}}
    def hwm(pid):
        try:
            for line in open(f"/proc/{{pid}}/status"):
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) // 1024
        except (OSError, TypeError):
            return 0
        return 0
    client_rss = hwm(os.getpid())
    server_rss = hwm(st.get("pid")) + hwm(st.get("engine_pid"))  # 2.x: Python wrapper + C++ engine
    s.close()
    print(json.dumps(dict(import_s=t1 - t0, open_s=t2 - t1, first_search_s=t3 - t2, second_search_s=t4 - t3,
                          client_peak_rss_mb=client_rss, server_peak_rss_mb=server_rss)))
    """
).format(dim=DIM)


def _child(db: str, mode: str | None) -> dict:
    env = dict(os.environ, PYTHONPATH=PKG_ROOT)
    env.pop(lite_settings.ENV_MODE, None)
    if mode:
        env[lite_settings.ENV_MODE] = mode
    out = subprocess.run([sys.executable, "-c", _CHILD, db], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("case", ["server_warm", "server_spawn", "embedded"])
def test_new_process_search(benchmark, populated, case):
    """A new CLI process: open + first search, against a warm server, a fresh spawn, or embedded."""
    db, _ = populated
    results = []

    def setup():
        if case == "server_warm":
            MilvusStore(db).close()  # make sure a server is up and has loaded the collection
        else:
            lite_broker.stop_server(db)

    def run():
        results.append(_child(db, "embedded" if case == "embedded" else None))

    benchmark.pedantic(run, setup=setup, rounds=2, iterations=1)
    best = min(results, key=lambda r: r["open_s"] + r["first_search_s"])
    benchmark.extra_info.update(engine=ENGINE, case=case, **{k: round(v, 3) for k, v in best.items() if v is not None})
    if case != "embedded":
        lite_broker.stop_server(db)


def test_server_first_connect(benchmark, populated):
    """Attach to a running server (lock + record check + gRPC connect + load) in this process."""
    db, _ = populated
    MilvusStore(db).close()

    def run():
        MilvusStore(db).close()

    benchmark.pedantic(run, rounds=5, iterations=1)
    st = lite_state.read_state(db) or {}
    rss = [_rss_mb(p) for p in (st.get("pid", -1), st.get("engine_pid") or -1)]
    benchmark.extra_info.update(engine=ENGINE, server_peak_rss_mb=round(sum(r for r in rss if r), 1))
