"""`memsearch mcp`: warm `memory_search` latency through the SDK's stdio client.

Run (benchmarks are disabled by default in pytest's addopts):

    python -m pytest benches/bench_mcp.py --benchmark-enable \
        --benchmark-columns=min,median,max,rounds -s -q

The corpus is the generated mix of daily logs and docs (`tests/helpers/corpus.py`),
``MEMSEARCH_BENCH_MCP_MB`` MB of it (default 5), indexed once by
`memsearch index` with the real ONNX model (int8, the default file), which
takes a few minutes on two cores. Then one `memsearch mcp` server is started
as a subprocess and every round is one `memory_search` call (top 5, a query
not asked before) from a `ClientSession` over stdio: JSON-RPC both ways, the
query's embedding, Milvus Lite's hybrid search and the JSON of the hits.
``MEMSEARCH_BENCH_MCP_ROUNDS`` (default 100) sets the rounds. Each test
prints and stores p50/p95 in ``extra_info``; the in-process row is the same
`tiered_search` on a `MemSearch` in this process (no protocol, no
subprocess), to show what the protocol adds.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import os
import random
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.corpus import EN, write_corpus

ROOT = Path(__file__).resolve().parents[1]
MODEL_DIR = Path(
    os.environ.get("MEMSEARCH_TEST_MODEL_DIR", ROOT.parent / "shared" / "models" / "all-MiniLM-L6-v2-onnx")
)
CORPUS_MB = float(os.environ.get("MEMSEARCH_BENCH_MCP_MB", "5"))
ROUNDS = int(os.environ.get("MEMSEARCH_BENCH_MCP_ROUNDS", "100"))

if not (MODEL_DIR / "tokenizer.json").is_file():
    pytest.skip(f"benchmark model not found at {MODEL_DIR}", allow_module_level=True)
mcp = pytest.importorskip("mcp")
from mcp import ClientSession, StdioServerParameters  # noqa: E402
from mcp.client.stdio import stdio_client  # noqa: E402


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSEARCH_")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # as installed: a process does not compile its modules again
    env.update(HOME=str(home), MEMSEARCH_OFFLINE="1", HF_HUB_OFFLINE="1", MEMSEARCH_LITE_IDLE_TIMEOUT="300")
    home.mkdir(parents=True, exist_ok=True)
    return env


def _queries(n: int, seed: int = 3) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(EN) for _ in range(rng.randint(3, 8))) for _ in range(n)]


def _percentiles(times: list[float]) -> dict[str, float]:
    ordered = sorted(times)

    def at(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000, 1)

    return {"p50_ms": at(0.50), "p95_ms": at(0.95), "max_ms": round(ordered[-1] * 1000, 1)}


class Client:
    """A stdio MCP client session on a loop of its own, called synchronously."""

    def __init__(self, params: StdioServerParameters, errlog: Any) -> None:
        self._params, self._errlog = params, errlog
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._stop: asyncio.Event | None = None
        self.session: ClientSession | None = None
        self.first_call_s: float | None = None
        ready: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._main = asyncio.run_coroutine_threadsafe(self._serve(ready), self._loop)
        ready.result(timeout=300)

    async def _serve(self, ready: concurrent.futures.Future[None]) -> None:
        self._stop = asyncio.Event()
        try:
            async with (
                stdio_client(self._params, errlog=self._errlog) as (read, write),
                ClientSession(read, write) as session,
            ):
                await session.initialize()
                self.session = session
                ready.set_result(None)
                await self._stop.wait()
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc)
            raise

    def call(self, name: str, args: dict[str, Any]) -> Any:
        assert self.session is not None
        result = asyncio.run_coroutine_threadsafe(self.session.call_tool(name, args), self._loop).result(300)
        assert not result.isError, result.content
        return result

    def close(self) -> None:
        assert self._stop is not None
        self._loop.call_soon_threadsafe(self._stop.set)
        self._main.result(timeout=60)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()


@pytest.fixture(scope="module")
def indexed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[list[str], dict[str, str], dict[str, Any]]]:
    """The corpus indexed with the real model: (flags, env, facts)."""
    base = tmp_path_factory.mktemp("mcp-bench")
    corpus = base / "corpus"
    total = write_corpus(corpus, total_bytes=int(CORPUS_MB * 1_000_000), seed=1)
    db = base / "m.db"
    env = _env(base / "home")
    flags = ["--milvus-uri", str(db), "-m", str(MODEL_DIR)]
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "memsearch_fast", "index", str(corpus), "-j", *flags],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=3600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(proc.stdout)
    facts = {
        "corpus_mb": round(total / 1e6, 2),
        "files": report["files"],
        "chunks": report["chunks"],
        "index_s": round(time.perf_counter() - t0, 1),
    }
    print(f"\nindexed {facts}")
    yield flags, env, facts
    from memsearch_fast.lite import broker as lite_broker

    lite_broker.stop_server(str(db))


@pytest.fixture(scope="module")
def client(indexed: tuple[list[str], dict[str, str], dict[str, Any]], tmp_path_factory: pytest.TempPathFactory) -> Any:
    flags, env, _ = indexed
    log = tmp_path_factory.mktemp("mcp-bench-log") / "server.err"
    params = StdioServerParameters(command=sys.executable, args=["-m", "memsearch_fast", "mcp", *flags], env=env)
    with log.open("w", encoding="utf-8") as errlog:
        t0 = time.perf_counter()
        c = Client(params, errlog)
        c.call("memory_search", {"query": "first call after start", "top_k": 5})
        c.first_call_s = round(time.perf_counter() - t0, 2)
        try:
            yield c
        finally:
            c.close()


def _measure(benchmark: Any, one: Any, queries: list[str]) -> dict[str, float]:
    it = iter(queries)
    times: list[float] = []

    def timed() -> None:
        t0 = time.perf_counter()
        one(next(it))
        times.append(time.perf_counter() - t0)

    for q in _queries(5, seed=99):
        one(q)  # warm: BM25 statistics, analyzer, onnxruntime's first runs
    benchmark.pedantic(timed, rounds=len(queries), iterations=1)
    return _percentiles(times)


@pytest.mark.parametrize(
    "tier",
    [
        pytest.param({}, id="plain"),
        pytest.param({"budget": 400}, id="budget"),
        pytest.param({"digest": True, "budget": 200, "min_score": 0.0}, id="digest-budget"),
    ],
)
def test_memory_search_warm_stdio(
    benchmark: Any, client: Any, indexed: tuple[list[str], dict[str, str], dict[str, Any]], tier: dict[str, Any]
) -> None:
    """One `memory_search` round trip through the stdio client, server warm."""
    _, _, facts = indexed

    def one(query: str) -> None:
        client.call("memory_search", {"query": query, "top_k": 5, **tier})

    stats = _measure(benchmark, one, _queries(ROUNDS, seed=len(tier)))
    benchmark.extra_info.update(
        facts, **stats, first_call_after_start_s=client.first_call_s, load_avg_1m=round(os.getloadavg()[0], 2)
    )
    print(f"\nmemory_search {tier or 'plain'} over stdio: {stats} ({facts}, first call {client.first_call_s} s)")


def test_tiered_search_in_process(benchmark: Any, indexed: tuple[list[str], dict[str, str], dict[str, Any]]) -> None:
    """The same search in this process: what the server does without the protocol."""
    from memsearch_fast.api import MemSearch
    from memsearch_fast.recall import search as recall

    flags, env, facts = indexed
    old_home = os.environ.get("HOME")
    os.environ["HOME"] = env["HOME"]
    ms = MemSearch(milvus_uri=flags[1], embedding_provider="onnx", embedding_model=flags[3])
    loop = asyncio.new_event_loop()
    try:

        def one(query: str) -> None:
            loop.run_until_complete(recall.tiered_search(ms, query, top_k=5, json_output=True))

        stats = _measure(benchmark, one, _queries(ROUNDS, seed=7))
    finally:
        loop.close()
        ms.close()
        if old_home is not None:
            os.environ["HOME"] = old_home
    benchmark.extra_info.update(facts, **stats)
    print(f"\ntiered_search in process: {stats}")
