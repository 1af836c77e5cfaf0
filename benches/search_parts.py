"""Where a search without the in-memory copy spends its time, on a database
``benches.lite_gb`` made (the copy's cap is 200,000 chunks: past it, every
process searches this way).

    python -m benches.search_parts DB

Prints, for five questions, the median and the slowest of each part: the
engine's dense list (30 and 300 deep) and its BM25 list, the span file scored
span by span and for the chunks of a list, what a search would still ask the
engine with a dense list of its own (the hits' rows by id, the dense scores
of the BM25 hits, the BM25 scores of the dense hits), and the whole hybrid search both
ways (``MEMSEARCH_SPAN_SCAN_MAX`` above the file's spans, and at its default).
Say the machine and its load: the figures move with both.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

QUESTIONS = [
    "which port does the relay listen on",
    "the deploy key rotation",
    "postgres migration failed",
    "what did we decide about the cache",
    "nightly backup schedule",
]


def main() -> None:
    os.environ["MEMSEARCH_DENSE_INDEX"] = "0"  # the engine and the span file alone
    from benches.lite_gb import HashVectors
    from memsearch_fast.store import MilvusStore
    from memsearch_fast.store.schema import QUERY_FIELDS

    db = sys.argv[1]
    store = MilvusStore(db, database=db)
    vectors = [asyncio.run(HashVectors().embed_query(q)) for q in QUESTIONS]
    print(f"chunks {store.count():,}, spans {store.spans.count():,}, load {os.getloadavg()[0]:.2f}", flush=True)

    def timed(label: str, fn: Callable[[str, list[float]], Any], n: int = len(QUESTIONS)) -> Any:
        took, out = [], None
        for q, v in zip(QUESTIONS[:n], vectors[:n], strict=True):
            start = time.perf_counter()
            out = fn(q, list(v))
            took.append(time.perf_counter() - start)
        print(f"{label:34s} p50 {statistics.median(took) * 1000:9.1f} ms   max {max(took) * 1000:9.1f} ms", flush=True)
        return out

    timed("dense list, 30 (engine)", lambda q, v: store._list_search([v], "embedding", "COSINE", 30, None))
    found = timed("dense list, 300 (engine)", lambda q, v: store._list_search([v], "embedding", "COSINE", 300, None))
    timed("BM25 list, 30 (engine)", lambda q, v: store.sparse_search(q, top_k=30, source_prefix=None))
    timed("spans, every one (span file)", lambda q, v: store.spans.search(v, 30, None), n=2)
    ids = [h["chunk_hash"] for h in found]
    timed("spans of 300 chunks (span file)", lambda q, v: store.spans.best_of(v, ids))
    # What a dense list from outside the engine would still ask it: the rows of
    # its hits, the dense scores of the BM25 hits, the BM25 scores of its hits.
    bm25 = {q: [h["chunk_hash"] for h in store.sparse_search(q, top_k=30)] for q in QUESTIONS}
    timed("rows of 30 hits by id (engine)", lambda q, v: store.rows_for_ids(bm25[q], QUERY_FIELDS))
    timed(
        "dense among 30 BM25 hits (engine)",
        lambda q, v: store._search_among(store.collection, [v], "embedding", "COSINE", bm25[q], ["chunk_hash"]),
    )
    timed(
        "BM25 among 300 dense hits (engine)",
        lambda q, v: store._search_among(store.collection, [q], "sparse_vector", "BM25", ids, ["chunk_hash"]),
    )
    os.environ["MEMSEARCH_SPAN_SCAN_MAX"] = str(10**12)
    timed("search, every span", lambda q, v: store.search(v, q, top_k=5), n=2)
    del os.environ["MEMSEARCH_SPAN_SCAN_MAX"]
    timed("search, spans of the lists' chunks", lambda q, v: store.search(v, q, top_k=5))
    store.close()


if __name__ == "__main__":
    main()
