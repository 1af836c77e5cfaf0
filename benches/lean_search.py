"""Warm search past the in-memory copy's cap, through the lean copy
(:mod:`memsearch_fast.store.copy.lean`), on a database ``benches.lite_gb`` made.

    python -m benches.lean_search DB [ROUNDS] [CORPUS_DIR [EDITS]]

Loads the lean copy as a long-lived process does (the database's service,
the MCP server), printing how long that took and this process's resident
memory before and after; then asks the agent set's 40 questions *ROUNDS*
times (default 3) through ``DenseIndex.search``, the way the service answers
(the query vectors made beforehand by ``benches.lite_gb``'s zero-cost
embedder, the engine's BM25 list and fill included), and prints p50 / p95,
beside the same search without a copy (Milvus and the span file, five
questions) and each part of a lean search on its own. With CORPUS_DIR (the
journals DB holds), one file is then edited and indexed as ``watch`` does
(that file alone, in a process of its own), and the time until the copy's search finds the new line
is printed: searchable (the copy, or Milvus while the copy is being refreshed,
as the service answers), and through the refreshed copy; *EDITS* times (default
1), each in a new index process. Say the machine and its load:
the figures move with both.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

#: The journal edited (by name order).
EDITED = 7


def _rss_mb(field: str = "VmRSS") -> int:
    return int(Path("/proc/self/status").read_text().split(f"{field}:")[1].split()[0]) // 1024


def main() -> None:
    from benches.fusion_offline import facts_of
    from benches.lite_gb import HashVectors
    from memsearch_fast.store import MilvusStore
    from memsearch_fast.store.copy import dense_index, lean
    from memsearch_fast.store.copy.file_rows import rows_from_files
    from memsearch_fast.store.schema import QUERY_FIELDS
    from memsearch_fast.store.search import candidates

    db = sys.argv[1]
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    store = MilvusStore(db, database=db, dimension=HashVectors.dimension)
    print(f"chunks {store.count():,}, spans {store.spans.count():,}, load {os.getloadavg()[0]:.2f}", flush=True)
    questions = [f.question for f in facts_of("agent", 40, 0, False)]
    vectors = [list(map(float, asyncio.run(HashVectors().embed_query(q)))) for q in questions]

    def timed(label: str, fn: Callable[[str, list[float]], Any], n: int = len(questions), times: int = 1) -> Any:
        took, out = [], None
        for _ in range(times):
            for q, v in zip(questions[:n], vectors[:n], strict=True):
                start = time.perf_counter()
                out = fn(q, v)
                took.append(time.perf_counter() - start)
        took.sort()
        p95 = took[min(len(took) - 1, round(0.95 * (len(took) - 1)))]
        print(f"{label:40s} p50 {statistics.median(took) * 1000:8.1f} ms   p95 {p95 * 1000:8.1f} ms", flush=True)
        return out

    os.environ["MEMSEARCH_DENSE_INDEX"] = "0"
    timed("search without a copy (engine, span file)", lambda q, v: store.search(v, q, top_k=5), n=5)
    del os.environ["MEMSEARCH_DENSE_INDEX"]

    rss0 = _rss_mb()
    args = {"uri": db, "collection": store.collection, "database": db}
    dense = dense_index.DenseIndex.for_store(args, db, store)
    assert dense is not None
    start = time.perf_counter()
    dense._start(full=True)
    if not dense.wait(3600) or not isinstance(dense._copy, lean.Lean):
        raise SystemExit("the lean copy did not load")
    copy = dense._copy
    print(
        f"lean copy: {len(copy.ids):,} chunks loaded in {time.perf_counter() - start:.1f} s; "
        f"RSS {rss0} -> {_rss_mb()} MB (peak {_rss_mb('VmHWM')} MB)",
        flush=True,
    )
    timed("search, lean copy (k=5)", lambda q, v: dense.search(store, v, q, top_k=5, source_prefix=None), times=rounds)
    timed("search, lean copy (k=10)", lambda q, v: dense.search(store, v, q, top_k=10, source_prefix=None))

    wide = candidates(30)
    top = timed("  own vectors, 300 best (codes)", lambda q, v: copy.own.top(v, wide))
    timed("  BM25 list, 30 (engine)", lambda q, v: store.sparse_search(q, top_k=30, source_prefix=None))
    ids = [copy.ids[g] for g in top]
    timed("  spans of 330 chunks (span file)", lambda q, v: store.spans.best_of(v, ids))
    wanted = {copy.ids[g]: copy.sources[g] for g in list(top)[:30]}
    timed("  fields of 30 hits (files)", lambda q, v: rows_from_files(copy.described, wanted))
    timed("  fields of 30 hits (engine, by id)", lambda q, v: store.rows_for_ids(list(wanted), QUERY_FIELDS), n=3)
    pairs = {q: [(h["chunk_hash"], h["distance"]) for h in store.sparse_search(q, top_k=30)] for q in questions}
    ranked = [(cid, 0.5) for cid in list(wanted)]
    timed("  BM25 of 30 dense hits (engine)", lambda q, v: store.fill_sparse(pairs[q], ranked, q))
    print(f"RSS after: {_rss_mb()} MB (peak {_rss_mb('VmHWM')} MB)", flush=True)
    copy = None  # the copy loaded first: let the refreshed ones replace it
    for _ in range(int(sys.argv[4]) if len(sys.argv) > 4 else 1) if len(sys.argv) > 3 else ():
        _edit(store, dense, Path(sys.argv[3]), db)
    dense.close()
    store.close()


#: The index run of ``_edit``, in a process of its own as ``watch`` runs it: the
#: store opened and the file indexed once unchanged first (as a watcher's first
#: sync warms it), then a path read from stdin indexed (that file alone) and
#: "done" printed.
_WATCHER = """
import asyncio, sys
from benches.lite_gb import HashVectors
from memsearch_fast.index.run import run_index
from memsearch_fast.store import MilvusStore
from memsearch_fast.store.manifest import Manifest

db = sys.argv[1]
store = MilvusStore(db, database=db, dimension=HashVectors.dimension)


def index(path):
    manifest = Manifest.for_store(db, store.collection)
    asyncio.run(run_index(store, HashVectors(), [path], only_sources=[path], manifest=manifest))


index(sys.argv[2])
print("ready", flush=True)
for line in sys.stdin:
    index(line.strip())
    print("done", flush=True)
"""


def _edit(store: Any, dense: Any, root: Path, db: str) -> None:
    """Edit one journal, index it as ``watch`` does (in another process), and
    wait for the service's search to find it, then for the copy to."""
    import subprocess

    from benches.lite_gb import HashVectors

    path = str(sorted(root.rglob("*.md"))[EDITED])
    watcher = subprocess.Popen(
        [sys.executable, "-c", _WATCHER, db, path],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[1]), *sys.path])},
    )
    assert watcher.stdin is not None and watcher.stdout is not None
    if watcher.stdout.readline().strip() != "ready":
        raise SystemExit("the index process did not start")
    text = f"zephyr gateway port {int(time.time()) % 100000}"
    vector = list(map(float, asyncio.run(HashVectors().embed_query(text))))
    deadline = time.perf_counter() + 120  # the copy current again after the watcher's first sync
    while dense.search(store, vector, text, top_k=5, source_prefix=None) is None and time.perf_counter() < deadline:
        time.sleep(0.1)
    with open(path, "a", encoding="utf-8") as f:
        f.write(f"\n\n## Ports\n\nThe {text} was opened for the relay.\n")
    start = time.perf_counter()
    watcher.stdin.write(path + "\n")
    watcher.stdin.flush()
    ran: dict[str, float] = {}

    def wait() -> None:
        assert watcher.stdout is not None
        if watcher.stdout.readline().strip() == "done":
            ran["done"] = time.perf_counter()

    waiter = threading.Thread(target=wait)
    waiter.start()
    found: dict[str, float] = {}
    while time.perf_counter() - start < 120 and len(found) < 2:
        hits = dense.search(store, vector, text, top_k=5, source_prefix=None)
        if hits is None:  # what the service does meanwhile: Milvus and the span file answer
            hits = store.search(vector, text, top_k=5)
        elif text in hits[0]["content"]:
            found.setdefault("copy", time.perf_counter())
        if hits and text in hits[0]["content"]:
            found.setdefault("searchable", time.perf_counter())
        time.sleep(0.02)
    waiter.join()
    watcher.stdin.close()
    watcher.wait()
    indexed = ran.get("done", float("nan"))
    if len(found) < 2:
        where = "through the copy" if found else "through the copy or Milvus"
        held = "held" if dense.loaded else "dropped, reading again" if dense.loading else "dropped"
        raise SystemExit(f"the edit was not found {where} in 120 s (copy {held}; index run {indexed - start:.2f} s)")
    print(
        f"edit -> searchable {found['searchable'] - start:.2f} s (index run {indexed - start:.2f} s), "
        f"through the copy {found['copy'] - start:.2f} s; RSS {_rss_mb()} MB (peak {_rss_mb('VmHWM')} MB)",
        flush=True,
    )


if __name__ == "__main__":
    main()
