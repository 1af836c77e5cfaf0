"""Warm search through the long-lived process's copy, on a database already indexed.

    python -m benches.warm_search --db W/r0-spans.db --set agent [--collection bench] [--rounds 3]

The database is one that ``benches.bench_spans --workdir W`` (or any index of
a ``benches.retrieval`` set, spans on) left behind: indexing 50 MB takes
hours on a 2-core machine, and a warm search is measured many times on one.
The copy is loaded as the database's service holds it (every size gets
one), then the set's questions are asked *rounds* times in this process
through ``DenseIndex.search``, the way the service answers a search: the
query vectors embedded beforehand, the engine's BM25 list and the BM25 fill
included. Prints p50 / p95 and how many searches asked the fill
(:func:`memsearch_fast.store.fusion.fill_matters`). Say the machine and its
``uptime`` load: only figures of one run compare.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", type=Path, required=True, help="the indexed Milvus Lite database")
    parser.add_argument("--set", dest="corpus_set", choices=["default", "agent", "dialogue"], default="agent")
    parser.add_argument("--collection", default="bench")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--top-k", type=int, default=10)
    args = parser.parse_args()
    os.environ["MEMSEARCH_DENSE_INDEX_MIN_ROWS"] = "0"  # the copy whatever the size, as the service holds it

    from benches.fusion_offline import facts_of
    from benches.retrieval import MODEL_DIR
    from memsearch_fast import MemSearch
    from memsearch_fast.store import fusion

    ms = MemSearch(
        [str(args.db.parent)],
        embedding_model=str(MODEL_DIR),
        milvus_uri=str(args.db),
        collection=args.collection,
        dense_index=True,
    )
    real = fusion.fill_matters
    try:
        questions = [f.question for f in facts_of(args.corpus_set, 40, 0, False)]
        start = time.perf_counter()
        asyncio.run(ms.search(questions[0], top_k=args.top_k))
        if ms._dense is None or not ms._dense.wait(3600):
            raise SystemExit("the in-memory copy did not load")
        load_s = time.perf_counter() - start
        store, dense = ms._search_store(), ms._dense
        vectors = [asyncio.run(ms._query_cache.vector(ms.provider, q)) for q in questions]
        asked: list[bool] = []

        def counted(*a: object, **k: object) -> bool:
            asked.append(real(*a, **k))  # type: ignore[arg-type]
            return asked[-1]

        fusion.fill_matters = counted
        load = os.getloadavg()[0]
        took = []
        for _ in range(args.rounds):
            for q, v in zip(questions, vectors, strict=True):
                t = time.perf_counter()
                dense.search(store, v, q, top_k=args.top_k, source_prefix=None)
                took.append(time.perf_counter() - t)
        took.sort()
        print(
            json.dumps(
                {
                    "copy_load_s": round(load_s, 1),
                    "searches": len(took),
                    "search_p50_ms": round(statistics.median(took) * 1000, 1),
                    "search_p95_ms": round(took[int(0.95 * (len(took) - 1))] * 1000, 1),
                    "fill_asked": sum(asked),
                    "load_at_start": round(load, 2),
                    "load_at_end": round(os.getloadavg()[0], 2),
                }
            )
        )
    finally:
        fusion.fill_matters = real
        ms.close()


if __name__ == "__main__":
    main()
