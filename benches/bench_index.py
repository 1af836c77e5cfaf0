"""Index pipeline benchmarks (issue targets in README).

Run: python -m pytest benches/bench_index.py --benchmark-enable -s
Sizes: MEMSEARCH_BENCH_SMALL_MB (default 20), MEMSEARCH_BENCH_LARGE_MB
(default 100), MEMSEARCH_BENCH_MODEL_MB (real-model run, default 1),
MEMSEARCH_BENCH_REF_MB (reference comparison, default 5; 0 skips it);
MEMSEARCH_BENCH_TIMEOUT (seconds one measured run may take, default 14400);
MEMSEARCH_BENCH_NOOP_FULL=0 skips the re-index without a manifest.

Each measured index run happens in a fresh subprocess so that peak RSS
(ru_maxrss) belongs to that run alone. The zero-cost embedder returns a fixed
vector: it isolates what the pipeline itself costs (scan, chunk, dedup,
upsert, flush) from the model.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.helpers.corpus import write_corpus

ROOT = Path(__file__).resolve().parents[1]
MODEL_DIR = Path(
    os.environ.get("MEMSEARCH_TEST_MODEL_DIR", ROOT.parent / "shared" / "models" / "all-MiniLM-L6-v2-onnx")
)
SMALL_MB = int(os.environ.get("MEMSEARCH_BENCH_SMALL_MB", "20"))
LARGE_MB = int(os.environ.get("MEMSEARCH_BENCH_LARGE_MB", "100"))
MODEL_MB = float(os.environ.get("MEMSEARCH_BENCH_MODEL_MB", "1"))
REF_MB = float(os.environ.get("MEMSEARCH_BENCH_REF_MB", "5"))
# memsearch 0.4.23 runs in the Python of an environment of its own: the tests'
# (MEMSEARCH_TEST_REFERENCE_PYTHON, on our milvus-lite), or another venv's to
# measure the reference as ``pip install memsearch==0.4.23`` sets it up (its own
# milvus-lite).
REF_PYTHON = (
    os.environ.get("MEMSEARCH_BENCH_REF_PYTHON") or os.environ.get("MEMSEARCH_TEST_REFERENCE_PYTHON") or sys.executable
)

RESULTS: dict[str, dict] = {}

ZERO_COST = """
class ZeroCost:
    model_name = "zero-cost"
    dimension = 384
    batch_size = 256
    def __init__(self):
        v = [0.0] * 384
        v[0] = 1.0
        self.v = v
    async def embed(self, texts):
        return [self.v] * len(texts)
    async def embed_query(self, text):
        return self.v
    def close(self):
        pass
"""

OURS = (
    ZERO_COST
    + """
import asyncio, json, os, resource, sys, time
from memsearch_fast.index import run_index
from memsearch_fast.store.manifest import Manifest
from memsearch_fast.index.scan import scan_paths
from memsearch_fast.store import MilvusStore
from memsearch_fast.embeddings import get_provider

root, uri, mode, model_dir = sys.argv[1:5]
t_open = time.perf_counter()
provider = ZeroCost() if mode == "zero" else get_provider("onnx", model=model_dir)
store = MilvusStore(uri, dimension=provider.dimension)
manifest = Manifest.for_store(uri, store.collection)
def index():
    return asyncio.run(run_index(store, provider, scan_paths([root]), cleanup_roots=[root], manifest=manifest))
t0 = time.perf_counter()
open_s = t0 - t_open
report = index()
wall = time.perf_counter() - t0
time.sleep(2.1)  # files written just before the run are re-read once (manifest.py: racy stat); not in a no-op
index()
t1 = time.perf_counter()
again = index()
noop = time.perf_counter() - t1
noop_full, full = None, again
if os.environ.get("MEMSEARCH_BENCH_NOOP_FULL", "1") != "0":  # 0: skip it (minutes at 1 GB)
    os.unlink(manifest.path)  # the no-op without a manifest: every file read, every stored id fetched
    t2 = time.perf_counter()
    full = index()
    noop_full = time.perf_counter() - t2
rows = store.count()
store.close()
print(json.dumps({"wall": wall, "open": open_s, "noop": noop, "noop_full": noop_full, "chunks": report.chunks,
                  "embedded": report.embedded, "rows": rows, "again_embedded": again.embedded,
                  "again_read": again.read, "full_embedded": full.embedded,
                  "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""
)

RENAME = (
    ZERO_COST
    + """
import asyncio, json, os, sys, time
from memsearch_fast.index import run_index
from memsearch_fast.store.manifest import Manifest
from memsearch_fast.index.scan import scan_paths
from memsearch_fast.store import MilvusStore

root, uri, moved, renamed = sys.argv[1:5]
provider = ZeroCost()
store = MilvusStore(uri, dimension=provider.dimension)
manifest = Manifest.for_store(uri, store.collection)
def index():
    t = time.perf_counter()
    r = asyncio.run(run_index(store, provider, scan_paths([root]), cleanup_roots=[root], manifest=manifest))
    return r, time.perf_counter() - t
first, _ = index()
os.rename(moved, renamed)
after, wall = index()
rows = store.count()
store.close()
print(json.dumps({"chunks": first.chunks, "rename_wall": wall, "rename_read": after.read,
                  "rename_embedded": after.embedded, "rename_reused": after.reused,
                  "sources_removed": after.sources_removed, "rows": rows}))
"""
)

FLOOR = """
import asyncio, json, sys, time
from memsearch_fast.index.chunk import chunk_files
from memsearch_fast.index.embed import embedding_text
from memsearch_fast.index.scan import scan_paths
from memsearch_fast.embeddings import get_provider

root, model_dir = sys.argv[1:3]
provider = get_provider("onnx", model=model_dir)
texts = [embedding_text(c) for b in chunk_files(scan_paths([root])) for fc in b for c in fc.chunks]
asyncio.run(provider.embed(texts[:64]))  # warm-up, as the pipeline's session is warm too
t0 = time.perf_counter()
async def run():
    step = 128
    for i in range(0, len(texts), step):
        await provider.embed(texts[i:i + step])
asyncio.run(run())
floor = time.perf_counter() - t0
t1 = time.perf_counter()
asyncio.run(provider.embed(texts))  # one call: the provider sorts all texts by token count (no padding to speak of)
print(json.dumps({"floor": floor, "floor_sorted": time.perf_counter() - t1, "texts": len(texts)}))
"""

REFERENCE = (
    ZERO_COST
    + """
import asyncio, json, resource, sys, time
from importlib.metadata import version
import memsearch.core as core

root, uri = sys.argv[1:3]
core.get_provider = lambda *a, **k: ZeroCost()
ms = core.MemSearch([root], milvus_uri=uri)
t0 = time.perf_counter()
n = asyncio.run(ms.index())
wall = time.perf_counter() - t0
ms.close()
print(json.dumps({"wall": wall, "chunks": n, "engine": version("milvus-lite"),
                  "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""
)


# One run may take hours: the reference's 50 MB end-to-end run alone is ~1.5-2 h on 2 cores.
RUN_TIMEOUT = int(os.environ.get("MEMSEARCH_BENCH_TIMEOUT", "14400"))


def run_script(script: str, *args: str, timeout: int = RUN_TIMEOUT, python: str = sys.executable) -> dict:
    out = subprocess.run(
        [python, "-c", textwrap.dedent(script), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def _require_reference() -> None:
    found = subprocess.run([REF_PYTHON, "-c", "import memsearch.core"], capture_output=True)
    if found.returncode != 0:
        pytest.skip(f"memsearch 0.4.23 is not importable by {REF_PYTHON}")


@pytest.fixture(scope="module")
def corpora(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = {}
    for name, mb in (("small", SMALL_MB), ("large", LARGE_MB), ("model", MODEL_MB), ("ref", REF_MB)):
        if mb <= 0:
            continue
        root = tmp_path_factory.mktemp(f"corpus-{name}")
        write_corpus(root, total_bytes=int(mb * 1_000_000), seed=11)
        out[name] = root
    return out


@pytest.mark.parametrize("size", ["small", "large"])
def test_zero_cost_pipeline(benchmark, corpora, tmp_path: Path, size: str) -> None:
    root = corpora[size]
    result = benchmark.pedantic(
        lambda: run_script(OURS, str(root), str(tmp_path / "m.db"), "zero", str(MODEL_DIR)), rounds=1, iterations=1
    )
    assert result["rows"] <= result["chunks"] and result["again_embedded"] == 0 == result["again_read"]
    result["mb"] = SMALL_MB if size == "small" else LARGE_MB
    result["us_per_chunk"] = result["wall"] / result["chunks"] * 1e6
    RESULTS[size] = result
    benchmark.extra_info.update(result)
    print(f"\nzero-cost {size} ({result['mb']} MB): {json.dumps(result)}")
    if "small" in RESULTS and "large" in RESULTS:
        s, lg = RESULTS["small"], RESULTS["large"]
        print(
            f"per-chunk cost large/small: {lg['us_per_chunk'] / s['us_per_chunk']:.2f}x; "
            f"RSS large/small: {lg['rss_mb'] / s['rss_mb']:.2f}x"
        )


def test_reference_zero_cost_pipeline(benchmark, corpora, tmp_path: Path) -> None:
    _require_reference()
    if "ref" not in corpora:
        pytest.skip("MEMSEARCH_BENCH_REF_MB=0")
    root = corpora["ref"]
    ours = run_script(OURS, str(root), str(tmp_path / "ours.db"), "zero", str(MODEL_DIR))
    ref = benchmark.pedantic(
        lambda: run_script(REFERENCE, str(root), str(tmp_path / "ref.db"), python=REF_PYTHON), rounds=1, iterations=1
    )
    RESULTS["ref"] = {"ours": ours, "reference": ref}
    benchmark.extra_info.update(ours=ours, reference=ref)
    print(
        f"\nzero-cost pipeline at {REF_MB} MB: ours {ours['wall']:.1f} s, reference {ref['wall']:.1f} s "
        f"({ref['wall'] / ours['wall']:.1f}x, reference on milvus-lite {ref['engine']}); "
        f"RSS ours {ours['rss_mb']:.0f} MB, reference {ref['rss_mb']:.0f} MB"
    )


def test_real_model_against_inference_floor(benchmark, corpora, tmp_path: Path) -> None:
    root = corpora["model"]
    floor = run_script(FLOOR, str(root), str(MODEL_DIR))
    ours = benchmark.pedantic(
        lambda: run_script(OURS, str(root), str(tmp_path / "m.db"), "model", str(MODEL_DIR)), rounds=1, iterations=1
    )
    assert ours["embedded"] == floor["texts"] or ours["embedded"] <= floor["texts"]
    RESULTS["model"] = {"floor": floor, "ours": ours}
    benchmark.extra_info.update(floor=floor, ours=ours)
    print(
        f"\nreal model at {MODEL_MB} MB: index wall {ours['wall']:.1f} s vs inference floor {floor['floor']:.1f} s "
        f"= {ours['wall'] / floor['floor']:.2f}x (texts in windows of 128), {floor['floor_sorted']:.1f} s = "
        f"{ours['wall'] / floor['floor_sorted']:.2f}x (all texts in one call) ({floor['texts']} chunks); "
        f"model load + store open {ours['open']:.1f} s; no-op re-index {ours['noop']:.2f} s "
        f"({ours['noop_full']:.2f} s without the manifest)"
    )


EMBED_WINDOW = """
import asyncio, json, sys, time
from memsearch_fast import compute_chunk_id
from memsearch_fast.embeddings import get_provider
from memsearch_fast.index.chunk import chunk_files
from memsearch_fast.index.embed import EmbedStage, Pending
from memsearch_fast.index.scan import scan_paths

root, model_dir, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
provider = get_provider("onnx", model=model_dir)
chunks = [c for b in chunk_files(scan_paths([root])) for fc in b for c in fc.chunks]
asyncio.run(provider.embed(["warm up"] * 64))
async def run(window):
    async def deliver(items):
        pass
    stage = EmbedStage(provider.embed, deliver, batch_size=128, window=window, in_flight=provider.workers + 1)
    for i in range(0, len(chunks), 200):  # as the chunk stream hands them over
        await stage.add([Pending(compute_chunk_id(c.source, c.start_line, c.end_line, c.content_hash, "m"), c)
                         for c in chunks[i:i + 200]])
    await stage.finish()
    return stage.embedded
out = {"plain": {"wall": [], "cpu": []}, "sorted": {"wall": [], "cpu": []}, "texts": 0}
for r in range(rounds):  # alternated, so drift in the machine's load hits both
    for name in (("plain", "sorted") if r % 2 == 0 else ("sorted", "plain")):
        t, c = time.perf_counter(), time.process_time()
        out["texts"] = asyncio.run(run(128 if name == "plain" else 2048))
        out[name]["wall"].append(time.perf_counter() - t)
        out[name]["cpu"].append(time.process_time() - c)
print(json.dumps(out))
"""


def test_embed_sort_window(benchmark, corpora) -> None:
    """Batches of 128 cut from a length-sorted window of 2,048 against batches of 128 in corpus order."""
    rounds = int(os.environ.get("MEMSEARCH_BENCH_AB_ROUNDS", "4"))
    root = corpora["model"]
    result = benchmark.pedantic(
        lambda: run_script(EMBED_WINDOW, str(root), str(MODEL_DIR), str(rounds)), rounds=1, iterations=1
    )
    benchmark.extra_info.update(result)
    fmt = {k: {m: [round(x, 2) for x in v] for m, v in result[k].items()} for k in ("plain", "sorted")}
    print(f"\nembed stage at {MODEL_MB} MB ({result['texts']} texts): {json.dumps(fmt)}")


REFERENCE_E2E = """
import asyncio, json, resource, sys, time
from importlib.metadata import version
import memsearch.core as core
from memsearch.embeddings import onnx as ref_onnx

root, uri, model_dir = sys.argv[1:4]
files = (model_dir + "/tokenizer.json", model_dir + "/onnx/model_quantized.onnx")
ref_onnx.OnnxEmbedding._download_model_files = staticmethod(lambda *a: files)
t_open = time.perf_counter()
ms = core.MemSearch([root], embedding_provider="onnx", embedding_model="local", milvus_uri=uri)
t0 = time.perf_counter()
n = asyncio.run(ms.index())
wall = time.perf_counter() - t0
ms.close()
print(json.dumps({"wall": wall, "open": t0 - t_open, "chunks": n, "engine": version("milvus-lite"),
                  "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""

SEARCH = """
import asyncio, json, statistics, sys, time
from memsearch_fast import MemSearch

root, uri, model_dir = sys.argv[1:4]
queries = ["thumbnail benchmark with libvips", "database migration lock timeout", "deploy key fingerprint",
           "flaky test shared temp directory", "retry backoff jitter", "搜索页面改版", "idempotency keys replay"]
async def main():
    with MemSearch([root], embedding_model=model_dir, milvus_uri=uri) as ms:
        t = time.perf_counter(); await ms.search(queries[0]); first = time.perf_counter() - t
        times = []
        for i in range(70):
            t = time.perf_counter()
            await ms.search(queries[i % len(queries)], top_k=5)
            times.append(time.perf_counter() - t)
        return first, times
first, times = asyncio.run(main())
times.sort()
print(json.dumps({"first_ms": first * 1e3, "p50_ms": statistics.median(times) * 1e3,
                  "p90_ms": times[int(len(times) * 0.9)] * 1e3}))
"""


def test_end_to_end_against_reference(benchmark, corpora, tmp_path: Path) -> None:
    _require_reference()
    root = corpora["model"]
    ours = run_script(OURS, str(root), str(tmp_path / "ours.db"), "model", str(MODEL_DIR))
    ref = benchmark.pedantic(
        lambda: run_script(REFERENCE_E2E, str(root), str(tmp_path / "ref.db"), str(MODEL_DIR), python=REF_PYTHON),
        rounds=1,
        iterations=1,
    )
    RESULTS["e2e"] = {"ours": ours, "reference": ref}
    benchmark.extra_info.update(ours=ours, reference=ref)
    print(
        f"\nend to end, int8 model, {MODEL_MB} MB: ours {ours['wall']:.1f} s (+{ours['open']:.1f} s open), "
        f"reference {ref['wall']:.1f} s (+{ref['open']:.1f} s open) = {ref['wall'] / ours['wall']:.1f}x "
        f"(reference on milvus-lite {ref['engine']})"
    )


def test_warm_search_latency(benchmark, corpora, tmp_path: Path) -> None:
    root = corpora["model"]
    uri = str(tmp_path / "m.db")
    run_script(OURS, str(root), uri, "model", str(MODEL_DIR))
    result = benchmark.pedantic(lambda: run_script(SEARCH, str(root), uri, str(MODEL_DIR)), rounds=1, iterations=1)
    RESULTS["search"] = result
    benchmark.extra_info.update(result)
    print(f"\nsearch (in process, hybrid, top 5): {json.dumps(result)}")


def test_directory_rename_embeds_nothing(benchmark, corpora, tmp_path: Path) -> None:
    """A directory holding ~20% of the corpus renamed: every chunk takes its stored vector."""
    import shutil

    if "small" not in corpora:
        pytest.skip("MEMSEARCH_BENCH_SMALL_MB=0")
    root = tmp_path / "corpus"
    shutil.copytree(corpora["small"], root)
    part = root / "docs" / "part"
    part.mkdir()
    for area in sorted((root / "docs").glob("area*"))[:6]:  # 6 of 17 doc areas: ~22% of the bytes
        area.rename(part / area.name)
    result = benchmark.pedantic(
        lambda: run_script(RENAME, str(root), str(tmp_path / "m.db"), str(part), str(root / "docs" / "renamed")),
        rounds=1,
        iterations=1,
    )
    assert result["rename_embedded"] == 0 and result["rows"] <= result["chunks"]
    benchmark.extra_info.update(result)
    print(f"\ndirectory rename at {SMALL_MB} MB: {json.dumps(result)}")


FLOOR_UNIQUE = """
import asyncio, json, resource, sys, time
from memsearch_fast.index.chunk import chunk_files
from memsearch_fast.index.embed import embedding_text
from memsearch_fast.index.scan import scan_paths
from memsearch_fast.embeddings import get_provider

root, model_dir = sys.argv[1:3]
provider = get_provider("onnx", model=model_dir)
texts = list(dict.fromkeys(embedding_text(c) for b in chunk_files(scan_paths([root])) for fc in b for c in fc.chunks))
asyncio.run(provider.embed(texts[:64]))  # the model loaded and warm
t0 = time.perf_counter()
asyncio.run(provider.embed(texts))  # one call: sorted by length, no padding to speak of
print(json.dumps({"floor": time.perf_counter() - t0, "texts": len(texts),
                  "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def test_cli_cold_index_against_floor(benchmark, corpora, tmp_path: Path) -> None:
    """`memsearch index` as a user runs it (process start, model load and the
    Lite server's start included) against the corpus's unique texts through
    the embedder alone with the model loaded; peak RSS of the CLI process
    (GNU time's maximum resident set; the Lite server is a process of its own)."""
    from memsearch_fast.lite import broker

    root = corpora["model"]
    floor = run_script(FLOOR_UNIQUE, str(root), str(MODEL_DIR))
    uri = str(tmp_path / "m.db")
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSEARCH_")}
    env.update(HOME=str(home), MEMSEARCH_OFFLINE="1", HF_HUB_OFFLINE="1")
    argv = ["/usr/bin/time", "-f", "TIME %e %M", sys.executable, "-m", "memsearch_fast", "index", str(root)]
    argv += ["--milvus-uri", uri, "-m", str(MODEL_DIR), "-q"]

    def cli() -> dict:
        out = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=RUN_TIMEOUT, cwd=tmp_path)
        assert out.returncode == 0, out.stderr[-3000:]
        wall, rss_kb = out.stderr.strip().splitlines()[-1].split()[1:3]
        return {"wall": float(wall), "rss_mb": int(rss_kb) / 1024}

    try:
        ours = benchmark.pedantic(cli, rounds=1, iterations=1)
    finally:
        broker.stop_server(uri)
    result = {"floor": floor, "cli": ours, "ratio": round(ours["wall"] / floor["floor"], 3), "mb": MODEL_MB}
    result["load_avg_1m"] = round(os.getloadavg()[0], 2)
    benchmark.extra_info.update(result)
    print(f"\ncold `memsearch index` at {MODEL_MB} MB against the inference floor: {json.dumps(result)}")


SCALE_SEARCH = """
import asyncio, hashlib, json, os, statistics, subprocess, sys, time
import numpy as np
from memsearch_fast import MemSearch
from memsearch_fast.embeddings import get_provider

root, uri, model_dir = sys.argv[1:4]
real = get_provider("onnx", model=model_dir)

class HashVectors:
    # The real model's name and dimension with vectors from a hash: the index of a
    # large corpus in seconds. Search costs the same whatever the vectors hold
    # (Milvus Lite searches every vector); the query is embedded by the real model.
    model_name, dimension, batch_size, workers = real.model_name, real.dimension, 256, 1
    async def embed(self, texts):
        out = []
        for t in texts:
            seed = int.from_bytes(hashlib.blake2b(t.encode(), digest_size=8).digest(), "little")
            v = np.random.default_rng(seed).standard_normal(384).astype(np.float32)
            out.append((v / np.linalg.norm(v)).tolist())
        return out
    async def embed_query(self, text):
        return (await self.embed([text]))[0]
    def close(self):
        pass

queries = ["thumbnail benchmark with libvips", "database migration lock timeout", "deploy key fingerprint",
           "flaky test shared temp directory", "retry backoff jitter", "搜索页面改版", "idempotency keys replay"]
with MemSearch([root], embedding_model=model_dir, milvus_uri=uri) as ms:
    ms._provider = HashVectors()
    t = time.perf_counter(); report = asyncio.run(ms.index_with_report()); index_s = time.perf_counter() - t
async def warm(ms):
    times = []
    for i in range(70):
        t = time.perf_counter()
        await ms.search(queries[i % len(queries)], top_k=5)
        times.append(time.perf_counter() - t)
    return sorted(times)
def rss_kb(pid="self"):
    return int(open(f"/proc/{pid}/status").read().split("VmRSS:")[1].split()[0])
with MemSearch([root], embedding_model=model_dir, milvus_uri=uri) as ms:
    asyncio.run(ms.search(queries[0]))
    times = asyncio.run(warm(ms))
    rows = ms.stats()
# The same searches with the vectors held in memory (what the search service and `mcp` do).
rss_before_kb = rss_kb()
with MemSearch([root], embedding_model=model_dir, milvus_uri=uri, dense_index=True) as ms:
    asyncio.run(ms.search(queries[0]))
    t = time.perf_counter(); ms._dense.wait(); dense_load_s = time.perf_counter() - t
    assert ms._dense.loaded
    dense_times = asyncio.run(warm(ms))
    dense_rss_mb = (rss_kb() - rss_before_kb) / 1024
env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSEARCH_")}
env.update(MEMSEARCH_OFFLINE="1", HF_HUB_OFFLINE="1")
def cli_searches(n, env):
    out = []
    for i in range(n):  # the Lite server is running (the in-process searches started it)
        t = time.perf_counter()
        subprocess.run([sys.executable, "-m", "memsearch_fast", "search", queries[i % len(queries)], "--milvus-uri",
                        uri, "-m", model_dir, "-j"], check=True, capture_output=True, env=env)
        out.append(time.perf_counter() - t)
    return out
served = sorted(cli_searches(13, env)[1:])  # the first loads pymilvus and the model in the server
time.sleep(dense_load_s * 2 + 5)  # the server's own copy of the vectors, started by those searches, loads
served_dense = sorted(cli_searches(12, env))
# Switched off: each process loads pymilvus and the model itself.
own = sorted(cli_searches(8, dict(env, MEMSEARCH_SEARCH_SERVICE="0")))
server_pid = json.load(open(uri + ".server.json"))["pid"]
server_rss_mb = rss_kb(server_pid) / 1024
print(json.dumps({"chunks": report.chunks, "index_s": index_s, "stats": rows,
                  "warm_p50_ms": statistics.median(times) * 1e3, "warm_p90_ms": times[int(len(times) * 0.9)] * 1e3,
                  "warm_dense_p50_ms": statistics.median(dense_times) * 1e3,
                  "warm_dense_p90_ms": dense_times[int(len(dense_times) * 0.9)] * 1e3,
                  "dense_load_s": dense_load_s, "dense_rss_growth_mb": dense_rss_mb,
                  "cli_p50_s": statistics.median(served), "cli_max_s": served[-1],
                  "cli_dense_p50_s": statistics.median(served_dense), "cli_dense_max_s": served_dense[-1],
                  "cli_in_process_p50_s": statistics.median(own), "server_rss_mb": server_rss_mb}))
"""


def test_search_latency_at_scale(benchmark, tmp_path: Path) -> None:
    """Warm in-process search and a cold `memsearch search` process (server
    running) on a MEMSEARCH_BENCH_SEARCH_MB corpus (default 50), its vectors
    from a hash under the real model's name, the query embedded by the model."""
    from memsearch_fast.lite import broker

    mb = float(os.environ.get("MEMSEARCH_BENCH_SEARCH_MB", "50"))
    root = tmp_path / "corpus"
    write_corpus(root, total_bytes=int(mb * 1_000_000), seed=11)
    uri = str(tmp_path / "m.db")
    try:
        result = benchmark.pedantic(
            lambda: run_script(SCALE_SEARCH, str(root), uri, str(MODEL_DIR)), rounds=1, iterations=1
        )
    finally:
        broker.stop_server(uri)
    result.update(mb=mb, load_avg_1m=round(os.getloadavg()[0], 2))
    benchmark.extra_info.update(result)
    print(f"\nsearch latency at {mb} MB: {json.dumps(result, default=str)}")
