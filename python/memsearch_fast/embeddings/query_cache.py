"""Query embeddings kept for reuse: agents and hooks repeat their queries, and a
long-lived process (``mcp``, the search service) should embed each one once."""

from __future__ import annotations

from collections import OrderedDict
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from memsearch_fast.embeddings import EmbeddingProvider

#: Queries kept per process.
SIZE = 256


class QueryCache:
    """A small LRU of query vectors, keyed by provider and text."""

    def __init__(self, size: int = SIZE) -> None:
        self.size = size
        self._vectors: OrderedDict[tuple[int, str], list[float]] = OrderedDict()

    async def vector(self, provider: EmbeddingProvider, query: str) -> list[float]:
        key = (id(provider), query)
        found = self._vectors.get(key)
        if found is not None:
            self._vectors.move_to_end(key)
            return found
        vector = await provider.embed_query(query)
        self._vectors[key] = vector
        if len(self._vectors) > self.size:
            self._vectors.popitem(last=False)
        return vector

    def __len__(self) -> int:
        return len(self._vectors)

    def clear(self) -> None:
        self._vectors.clear()
