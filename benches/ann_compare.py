"""The dense list at 1 GB without the engine: the copy's int8 kernel (sign-bit
shortlist, then the codes) against an HNSW index (usearch, when installed),
on 1.2 M chunk vectors, the count of 1 GB of journals.

    python -m benches.ann_compare [--rows N] [--queries Q] [--k K]

usearch is not a dependency: install it beside the package to compare
(``pip install usearch``); without it only the kernel runs. The vectors are
clustered like a model's (a few thousand topics, each vector a topic plus
noise, unit length) in the 128 dimensions a span basis keeps, and each query
is a stored vector moved a little, as a question near a fact. Recall is
against the exact float32 ranking. Say the machine and its load.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np


def vectors(rows: int, dim: int, topics: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centers = rng.standard_normal((topics, dim)).astype(np.float32)
    out = np.empty((rows, dim), np.float32)
    step = 200_000
    for i in range(0, rows, step):
        n = min(step, rows - i)
        m = centers[rng.integers(0, topics, n)] + 0.9 * rng.standard_normal((n, dim)).astype(np.float32)
        out[i : i + n] = m / np.linalg.norm(m, axis=1, keepdims=True)
    return out


def exact(matrix: np.ndarray, q: np.ndarray, k: int) -> list[int]:
    """The *k* best rows, best first."""
    scores = matrix @ q
    top = np.argpartition(-scores, k)[:k]
    return top[np.argsort(-scores[top])].tolist()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_200_000)
    ap.add_argument("--queries", type=int, default=30)
    ap.add_argument("--k", type=int, default=300)
    ap.add_argument("--dim", type=int, default=128)
    args = ap.parse_args()
    from memsearch_fast.store.copy.spans import OwnRows

    matrix = vectors(args.rows, args.dim, topics=4000)
    rng = np.random.default_rng(1)
    picks = rng.integers(0, args.rows, args.queries)
    queries = matrix[picks] + 0.05 * rng.standard_normal((args.queries, args.dim)).astype(np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    truth = [exact(matrix, q, args.k) for q in queries]  # and its first ten: what the fused top 5 draws on
    print(f"rows {args.rows:,} x {args.dim}, k {args.k}, load {os.getloadavg()[0]:.2f}", flush=True)

    def report(label: str, search: object) -> None:
        took, recall, first = [], [], []
        for q, want in zip(queries, truth, strict=True):
            start = time.perf_counter()
            got = set(search(q))  # type: ignore[operator]
            took.append(time.perf_counter() - start)
            recall.append(len(got & set(want)) / len(want))
            first.append(len(got & set(want[:10])) / 10)
        print(
            f"{label:38s} p50 {statistics.median(took) * 1000:7.1f} ms  max {max(took) * 1000:7.1f} ms  "
            f"recall@{args.k} {statistics.mean(recall):.3f}  exact top 10 found {statistics.mean(first):.3f}",
            flush=True,
        )

    start = time.perf_counter()
    own = OwnRows.of(matrix)
    print(f"int8 codes + sign bits: {time.perf_counter() - start:.1f} s, {len(own.codes) + len(own.signs):,} bytes")
    report("int8 kernel, sign-bit shortlist", lambda q: list(own.top(q.tolist(), args.k)))
    report("float32 matrix product (numpy)", lambda q: exact(matrix, q, args.k))
    try:
        from usearch.index import Index
    except ImportError:
        print("usearch not installed: HNSW not compared")
        return
    for dtype in ("i8",):
        index = Index(ndim=args.dim, metric="cos", dtype=dtype, connectivity=16, expansion_add=128)
        start = time.perf_counter()
        index.add(np.arange(args.rows), matrix, threads=os.cpu_count() or 1)
        built = time.perf_counter() - start
        print(f"usearch HNSW {dtype}: built in {built:.0f} s, {index.memory_usage:,} bytes")
        for ef in (args.k, 2 * args.k, 4 * args.k):
            index.expansion_search = ef
            report(
                f"usearch HNSW {dtype}, expansion {ef}",
                lambda q, ix=index: ix.search(q, args.k, threads=1).keys.tolist(),
            )


if __name__ == "__main__":
    main()
