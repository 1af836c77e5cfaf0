"""Identical queries in one process are embedded once (a small LRU per MemSearch)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from memsearch_fast import MemSearch
from memsearch_fast.embeddings.query_cache import SIZE as QUERY_CACHE_SIZE


def test_repeated_queries_are_embedded_once(tmp_path: Path, model_dir: Path) -> None:
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "a.md").write_text("# Cats\n\nThe cat sleeps on the warm laptop.\n", encoding="utf-8")
    (notes / "b.md").write_text("# Queues\n\nThe job queue retries with backoff.\n", encoding="utf-8")
    db = tmp_path / "m.db"
    ms = MemSearch([str(notes)], embedding_model=str(model_dir), milvus_uri=str(db))
    calls: list[str] = []
    try:
        asyncio.run(ms.index())
        real = ms.provider.embed_query

        async def counted(query: str) -> Any:
            calls.append(query)
            return await real(query)

        ms.provider.embed_query = counted  # type: ignore[method-assign]

        async def scenario() -> list[list[dict[str, Any]]]:
            return [await ms.search(q, top_k=2) for q in ("sleeping cat", "sleeping cat", "queue retries")]

        first, again, other = asyncio.run(scenario())
        assert calls == ["sleeping cat", "queue retries"]
        assert first == again and first[0]["source"].endswith("a.md") and other[0]["source"].endswith("b.md")

        async def many() -> None:
            for i in range(QUERY_CACHE_SIZE + 1):
                await ms.search(f"query {i}", top_k=1)
            await ms.search("query 0", top_k=1)  # evicted: the oldest entry went first

        asyncio.run(many())
        assert calls.count("query 0") == 2 and len(ms._query_cache) == QUERY_CACHE_SIZE
    finally:
        ms.close()
        from memsearch_fast.lite import broker

        broker.stop_server(str(db))
