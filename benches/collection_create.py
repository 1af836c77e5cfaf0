"""What a new collection costs: pymilvus's create_collection with index_params
(which sleeps 0.5 s per index before its first check) against the store's
``create_loaded``, alternated on one embedded Milvus Lite database
(docs/testing.md, "pymilvus's fixed waits").

    python benches/collection_create.py [ROUNDS]
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def main(rounds: int) -> None:
    from pymilvus import DataType, MilvusClient

    from memsearch_fast.lite import embedded
    from memsearch_fast.store.compat import create_loaded

    with tempfile.TemporaryDirectory() as tmp:
        client = embedded.open_client(str(Path(tmp) / "m.db"), lambda uri: MilvusClient(uri=uri))

        def schema_and_index() -> tuple[Any, Any]:
            schema = client.create_schema()
            schema.add_field("id", DataType.VARCHAR, max_length=64, is_primary=True)
            schema.add_field("embedding", DataType.FLOAT_VECTOR, dim=384)
            index = client.prepare_index_params()
            index.add_index(field_name="embedding", index_type="FLAT", metric_type="COSINE")
            return schema, index

        took: dict[str, list[float]] = {"pymilvus": [], "create_loaded": []}
        for i in range(rounds):
            for way in took:
                name = f"{way}_{i}"
                schema, index = schema_and_index()
                start = time.perf_counter()
                if way == "pymilvus":
                    client.create_collection(collection_name=name, schema=schema, index_params=index)
                else:
                    create_loaded(client, name, schema, index)
                took[way].append(time.perf_counter() - start)
                client.drop_collection(name)
        for way, seconds in took.items():
            print(f"{way:>14}: median {statistics.median(seconds):.3f} s over {rounds} (one index each)")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 5)
