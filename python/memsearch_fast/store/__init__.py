"""The Milvus store: the rebuildable index behind the markdown files."""

from __future__ import annotations

from memsearch_fast.errors import (
    DatabaseDamagedError,
    DimensionMismatchError,
    ModelMismatchError,
    StoreError,
    StoreUnavailableError,
)
from memsearch_fast.store.filters import (
    escape_filter_value,
    prefix_filter,
    quote_filter_value,
)
from memsearch_fast.store.milvus import MilvusStore
from memsearch_fast.store.rows import (
    MAX_CONTENT_BYTES,
    MAX_HEADING_BYTES,
    MAX_SOURCE_BYTES,
    split_long_rows,
)
from memsearch_fast.store.schema import EmbeddingModel

__all__ = [
    "MAX_CONTENT_BYTES",
    "MAX_HEADING_BYTES",
    "MAX_SOURCE_BYTES",
    "DatabaseDamagedError",
    "DimensionMismatchError",
    "EmbeddingModel",
    "MilvusStore",
    "ModelMismatchError",
    "StoreError",
    "StoreUnavailableError",
    "escape_filter_value",
    "prefix_filter",
    "quote_filter_value",
    "split_long_rows",
]
