"""Index agent journals with span vectors on Milvus Lite, the writes alone: how the
database, the engine's memory and the write rate grow toward 1 GB of markdown.

    python -m benches.lite_gb CORPUS_DIR DB [MB]

Builds *MB* (default 1,000) of ``benches.agent_corpus`` journals in CORPUS_DIR
unless it exists, then indexes them into DB with an embedder that costs almost
nothing (a distinct random unit vector a text, so a span basis is fitted as on
real vectors) and prints a JSON line a minute: seconds since the start, rows
written and seconds spent in writes (span and chunk rows; writes overlap, so
the seconds can pass the wall time), the database's bytes, this process's and
the Lite engine's resident memory, and the load. The span rows are written to the
span file beside the database (``MEMSEARCH_SPAN_STORE=collection``: to a companion
collection in Lite, as before; ``MEMSEARCH_SPANS=0``: none). It is resumable: run it again
and the manifest carries on where a stopped run left off. Say the machine and
its load: the figures move with both.
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import subprocess
import sys
import threading
import time
import zlib
from pathlib import Path
from typing import Any

import numpy as np


class HashVectors:
    """A distinct random unit vector a text: as cheap as an embedder can be."""

    model_name = "hash-vectors"
    dimension = 384
    batch_size = 256
    workers = 1

    async def embed(self, texts: list[str]) -> list[Any]:
        rng = np.random.default_rng(zlib.crc32("".join(texts[:4]).encode()) + len(texts))
        m = rng.standard_normal((len(texts), self.dimension)).astype(np.float32)
        m /= np.linalg.norm(m, axis=1, keepdims=True)
        return list(m)

    async def embed_query(self, text: str) -> list[float]:
        out: list[float] = (await self.embed([text]))[0].tolist()
        return out

    def close(self) -> None:
        pass


def _rss_mb(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/status").read_text().split("VmRSS:")[1].split()[0]) // 1024
    except (OSError, IndexError, ValueError):
        return None


def _engines(db: str) -> list[int]:
    """The Milvus Lite engine processes serving *db*."""
    out = []
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                cmd = Path(f"/proc/{p}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if "milvus_lite/lib/milvus" in cmd and db in cmd:
                out.append(int(p))
    return out


def main() -> None:
    root, db = Path(sys.argv[1]), sys.argv[2]
    mb = float(sys.argv[3]) if len(sys.argv) > 3 else 1000.0
    if not root.exists():
        # Built in a process of its own: this one's peak RSS is then the index run's alone.
        start = time.perf_counter()
        build = "import sys; from pathlib import Path; from benches import agent_corpus; "
        build += "agent_corpus.build(Path(sys.argv[1]), float(sys.argv[2]), 40, 0)"
        here = Path(__file__).resolve().parents[1]
        subprocess.run([sys.executable, "-c", build, str(root.resolve()), str(mb)], check=True, cwd=here)
        print(json.dumps({"built_s": round(time.perf_counter() - start, 1)}), flush=True)

    from memsearch_fast.index import run_index
    from memsearch_fast.index.scan import scan_paths
    from memsearch_fast.store import MilvusStore
    from memsearch_fast.store import milvus as milvus_store
    from memsearch_fast.store.manifest import Manifest
    from memsearch_fast.store.spans import collection as span_store
    from memsearch_fast.store.spans import file as span_file

    totals = {"span_rows": 0, "span_s": 0.0, "chunk_rows": 0, "chunk_s": 0.0}
    lock = threading.Lock()

    def timed(cls: Any, kind: str) -> None:
        write = cls._write

        def _write(self: Any, op: str, rows: list[Any], *a: Any, **k: Any) -> int:
            start = time.perf_counter()
            try:
                return int(write(self, op, rows, *a, **k))
            finally:
                with lock:
                    totals[kind + "_rows"] += len(rows)
                    totals[kind + "_s"] += time.perf_counter() - start

        cls._write = _write

    timed(span_store.SpanStore, "span")
    timed(milvus_store.MilvusStore, "chunk")
    put = span_file.SpanFile.put

    def timed_put(self: Any, span_rows: list[Any], own_rows: list[Any], **k: Any) -> int:
        start = time.perf_counter()
        try:
            return int(put(self, span_rows, own_rows, **k))
        finally:
            with lock:
                totals["span_rows"] += len(span_rows)
                totals["span_s"] += time.perf_counter() - start

    put_chunks = span_file.SpanFile.put_chunks

    def timed_put_chunks(self: Any, chunks: list[Any], **k: Any) -> int:
        start = time.perf_counter()
        try:
            return int(put_chunks(self, chunks, **k))
        finally:
            with lock:
                totals["span_rows"] += sum(len(c.spans) for c in chunks)
                totals["span_s"] += time.perf_counter() - start

    span_file.SpanFile.put = timed_put  # type: ignore[method-assign]
    span_file.SpanFile.put_chunks = timed_put_chunks  # type: ignore[method-assign]
    t0 = time.perf_counter()
    done = threading.Event()

    def line(**extra: Any) -> str:
        with lock:
            now = {k: round(v, 1) for k, v in totals.items()}
        size = sum(f.stat().st_size for f in Path(db).parent.glob(Path(db).name + "*") if f.is_file())
        return json.dumps(
            {
                "t": round(time.perf_counter() - t0),
                **now,
                "db_mb": round(size / 1e6),
                "rss_mb": _rss_mb(os.getpid()),
                "engine_rss_mb": [_rss_mb(p) for p in _engines(db)],
                "load": round(os.getloadavg()[0], 2),
                **extra,
            }
        )

    def tick() -> None:
        while not done.wait(60):
            print(line(), flush=True)

    threading.Thread(target=tick, daemon=True).start()
    # As `memsearch index` does when it creates the database: nothing stored to reconcile.
    new = not Path(db).exists()
    store = MilvusStore(db, dimension=HashVectors.dimension)
    manifest = Manifest.for_store(db, store.collection)
    files = scan_paths([str(root)])
    report = asyncio.run(
        run_index(store, HashVectors(), files, cleanup_roots=[str(root)], manifest=manifest, new_store=new)
    )
    done.set()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    print(line(chunks=report.chunks, rows=store.count(), span_rows_stored=store.spans.count(), peak_rss_mb=peak))
    store.close()


if __name__ == "__main__":
    main()
