"""Memory the dedup stage holds for the ids already stored.

Run: python -m pytest benches/bench_dedup.py --benchmark-enable -s
Size: MEMSEARCH_BENCH_DEDUP_IDS (default 1,000,000 ids, 20 per source).

An index run keeps every stored id while it runs (to diff files and find
deleted ones), so this is the part of its memory that grows with the index.
Measured with tracemalloc: bytes retained per id, the peak while building,
and the naive form (a list of rows, then a set of id strings per source) for
comparison.
"""

from __future__ import annotations

import gc
import hashlib
import os
import tracemalloc

from memsearch_fast.index.dedup import Dedup

IDS = int(os.environ.get("MEMSEARCH_BENCH_DEDUP_IDS", "1000000"))
PER_SOURCE = 20


def _rows() -> list[tuple[str, str]]:
    # As the store yields them: a fresh id and source string per row, ids in our format.
    return [
        (
            hashlib.sha256(str(i).encode()).hexdigest()[:16],
            "".join(f"notes/d{i // PER_SOURCE % 100}/f{i // PER_SOURCE}.md"),
        )
        for i in range(IDS)
    ]


def _measure(build) -> tuple[float, float]:
    rows = _rows()
    gc.collect()
    tracemalloc.start()
    try:
        held = build(rows)
        gc.collect()
        current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    del held
    return current / IDS, peak / IDS


def _naive(rows: list[tuple[str, str]]) -> dict[str, set[str]]:
    copied = [(cid, "".join(src)) for cid, src in rows]  # what list(iterator) holds
    by_source: dict[str, set[str]] = {}
    for cid, src in copied:
        by_source.setdefault(src, set()).add("".join(cid))
    return by_source


def test_dedup_memory_per_id(benchmark) -> None:
    packed, packed_peak = benchmark.pedantic(
        lambda: _measure(lambda rows: Dedup("m", iter(rows))), rounds=1, iterations=1
    )
    naive, naive_peak = _measure(_naive)
    benchmark.extra_info.update(packed=packed, packed_peak=packed_peak, naive=naive, naive_peak=naive_peak)
    print(
        f"\ndedup, {IDS:,} stored ids ({PER_SOURCE} per source): packed {packed:.1f} B/id held "
        f"(peak {packed_peak:.1f}); rows + sets of strings {naive:.1f} B/id (peak {naive_peak:.1f})"
    )
    assert packed < naive
