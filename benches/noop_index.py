"""A no-op re-index of a database ``benches.lite_gb`` made: the time to open it
(the Lite engine loading its file, when no server has it loaded) and, for each
run, the scan and the run against the manifest.

    python -m benches.noop_index CORPUS_DIR DB [RUNS]

Say the machine and its load: the figures move with both.
"""

from __future__ import annotations

import asyncio
import sys
import time


def main() -> None:
    root, db = sys.argv[1], sys.argv[2]
    runs = int(sys.argv[3]) if len(sys.argv) > 3 else 2
    t0 = time.perf_counter()
    from benches.lite_gb import HashVectors
    from memsearch_fast.index.run import run_index
    from memsearch_fast.index.scan import scan_paths
    from memsearch_fast.store import MilvusStore
    from memsearch_fast.store.manifest import Manifest

    t1 = time.perf_counter()
    print(f"imports {t1 - t0:.2f} s", flush=True)
    store = MilvusStore(db, dimension=HashVectors.dimension)
    rows = store.count()
    print(f"open and count {time.perf_counter() - t1:.2f} s ({rows} chunks)", flush=True)
    for i in range(runs):
        a = time.perf_counter()
        manifest = Manifest.for_store(db, store.collection)
        files = scan_paths([root])
        b = time.perf_counter()
        report = asyncio.run(run_index(store, HashVectors(), files, cleanup_roots=[root], manifest=manifest))
        c = time.perf_counter()
        print(
            f"run {i}: scan {b - a:.2f} s, index {c - b:.2f} s, total {c - a:.2f} s; "
            f"{report.files} files, {report.unchanged} unchanged, {report.embedded} embedded",
            flush=True,
        )
    store.close()


if __name__ == "__main__":
    main()
