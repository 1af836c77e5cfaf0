"""What an index run needs from a store: the seam between ``index/`` and ``store/``.

:class:`memsearch_fast.store.MilvusStore` is the one real implementation;
the protocol keeps the stages typed without importing it (a store that is
still opening, ``store.opening.OpeningStore``, stands in for it too).
``collection`` and ``collection_id()`` are used when a store has them.
"""

from __future__ import annotations

from collections.abc import Generator, Iterable, Iterator
from typing import Any, Protocol


class IndexStore(Protocol):
    def insert(self, rows: list[dict[str, Any]]) -> int:
        """Write rows whose ids are known to be new (cheaper than upsert)."""
        ...

    def upsert(self, rows: list[dict[str, Any]]) -> int: ...

    def delete_ids(self, ids: Iterable[str]) -> int: ...

    def delete_sources(self, sources: Iterable[str]) -> int: ...

    def flush(self) -> None: ...

    def count(self) -> int: ...

    def iter_ids_by_source(self, sources: Iterable[str] | None = None) -> Generator[tuple[str, str]]: ...

    def iter_rows_for_sources(self, sources: list[str], fields: list[str]) -> Iterator[list[dict[str, Any]]]: ...

    def rows_for_ids(self, ids: list[str], fields: list[str]) -> list[dict[str, Any]]: ...
