"""Does a vector index make Milvus Lite's dense search faster? (README: search at 50 MB)

Inserts N random unit 384-d vectors (default 63,000: the 50 MB corpus's chunk
count) into a fresh embedded Milvus Lite collection per index type and prints
the search p50 over 50 queries and recall@10 against exact cosine. Recall
1.000 at a small nprobe means every vector was scanned (no index was used).

    python benches/lite_index_types.py [N] [FLAT,IVF_256,IVF_1024]
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def main(n: int, kinds: list[str]) -> None:
    from pymilvus import DataType, MilvusClient

    from memsearch_fast.lite import embedded

    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, 384)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    queries = x[rng.integers(0, n, 50)] + 0.05 * rng.standard_normal((50, 384)).astype(np.float32)
    for kind in kinds:
        with tempfile.TemporaryDirectory() as d:
            db = str(Path(d) / "m.db")
            client = embedded.open_client(db, lambda uri: MilvusClient(uri=uri))
            schema = client.create_schema(auto_id=False)
            schema.add_field("id", DataType.INT64, is_primary=True)
            schema.add_field("v", DataType.FLOAT_VECTOR, dim=384)
            index = client.prepare_index_params()
            nlist = int(kind.split("_")[-1]) if kind.startswith("IVF") else 0
            index.add_index(
                field_name="v",
                index_type="IVF_FLAT" if nlist else kind,
                metric_type="COSINE",
                params={"nlist": nlist} if nlist else {},
            )
            client.create_collection("t", schema=schema, index_params=index)
            t = time.perf_counter()
            for i in range(0, n, 5000):
                client.insert("t", [{"id": j, "v": x[j].tolist()} for j in range(i, min(n, i + 5000))])
            client.flush("t")
            insert_s = time.perf_counter() - t
            info = client.describe_index("t", "v")
            client.load_collection("t")
            for params in [{"nprobe": 8}, {"nprobe": 32}] if nlist else [{}]:
                sp = {"metric_type": "COSINE", "params": params}
                client.search("t", data=[queries[0].tolist()], anns_field="v", limit=10, search_params=sp)
                times, found = [], 0
                for q in queries:
                    t = time.perf_counter()
                    res = client.search("t", data=[q.tolist()], anns_field="v", limit=10, search_params=sp)
                    times.append(time.perf_counter() - t)
                    truth = set(np.argsort(-(x @ q))[:10].tolist())
                    found += len(truth & {h["id"] for h in res[0]})
                print(
                    f"{kind} {params or ''} indexed_rows={info.get('indexed_rows')} insert {insert_s:.1f}s "
                    f"p50 {statistics.median(times) * 1e3:.2f} ms recall@10 {found / (10 * len(queries)):.3f}"
                )
            client.close()
            embedded.release(db)


if __name__ == "__main__":
    main(
        int(sys.argv[1]) if len(sys.argv) > 1 else 63000,
        (sys.argv[2] if len(sys.argv) > 2 else "FLAT,IVF_256").split(","),
    )
