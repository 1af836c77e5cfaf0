"""Does a write cost more as the collection grows? (docs/store.md: insert or upsert)

Writes N rows (default 150,000: ~800 bytes of text each, a fixed vector) into a
fresh collection of the product's schema through ``MilvusStore``, 1,000 rows a
call with four calls in flight as the upsert stage sends them, and prints the
seconds each 25,000 rows took, for ``upsert`` and ``insert``.

    python benches/lite_write_growth.py [N] [upsert,insert]
"""

from __future__ import annotations

import hashlib
import random
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

STEP = 25_000


def rows(rnd: random.Random, start: int, n: int) -> list[dict]:
    vector = [1.0] + [0.0] * 383
    return [
        {
            "chunk_hash": hashlib.sha256(str(i).encode()).hexdigest()[:16],
            "embedding": vector,
            "content": " ".join(f"w{rnd.randrange(20_000)}" for _ in range(110)),
            "source": f"/notes/{i // 20}.md",
            "heading": "h",
            "heading_level": 1,
            "start_line": i,
            "end_line": i + 1,
        }
        for i in range(start, start + n)
    ]


def main(n: int, ops: list[str]) -> None:
    from memsearch_fast.lite import broker
    from memsearch_fast.store import MilvusStore

    for op in ops:
        with tempfile.TemporaryDirectory() as d:
            db = str(Path(d) / "m.db")
            try:
                with MilvusStore(db, dimension=384) as store:
                    times = measure(getattr(store, op), n)
                    store.flush()
                    rows_stored = store.count()
            finally:
                broker.stop_server(db)  # before its directory goes
        print(f"{op}: {rows_stored} rows; seconds per {STEP:,} rows as the collection grows: {times}", flush=True)


def measure(write: Callable[[list[dict]], int], n: int) -> list[float]:
    rnd = random.Random(1)
    times, last = [], time.perf_counter()
    with ThreadPoolExecutor(4) as pool:
        for start in range(0, n, STEP):
            list(pool.map(write, [rows(rnd, s, 1000) for s in range(start, min(n, start + STEP), 1000)]))
            now = time.perf_counter()
            times.append(round(now - last, 1))
            last = now
    return times


if __name__ == "__main__":
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 150_000
    main(count, (sys.argv[2] if len(sys.argv) > 2 else "upsert,insert").split(","))
