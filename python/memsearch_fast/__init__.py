"""memsearch-fast: markdown-first semantic memory for AI coding agents.

Names are resolved lazily so that ``memsearch --help`` and agent hooks do not
pay for importing the Rust core, onnxruntime or pymilvus until they need them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_LAZY = {
    "ScannedFile": "memsearch_fast.index.scan",
    "scan_paths": "memsearch_fast.index.scan",
    "Chunk": "memsearch_fast.index.chunk",
    "FileChunks": "memsearch_fast.index.chunk",
    "chunk_markdown": "memsearch_fast.index.chunk",
    "chunk_files": "memsearch_fast.index.chunk",
    "clean_content_for_embedding": "memsearch_fast.index.chunk",
    "compute_chunk_id": "memsearch_fast.index.chunk",
    "MemSearch": "memsearch_fast.api",
}

__all__ = [
    "Chunk",
    "FileChunks",
    "MemSearch",
    "ScannedFile",
    "__version__",
    "chunk_files",
    "chunk_markdown",
    "clean_content_for_embedding",
    "compute_chunk_id",
    "scan_paths",
]

if TYPE_CHECKING:
    from memsearch_fast.api import MemSearch
    from memsearch_fast.index.chunk import (
        Chunk,
        FileChunks,
        chunk_files,
        chunk_markdown,
        clean_content_for_embedding,
        compute_chunk_id,
    )
    from memsearch_fast.index.scan import ScannedFile, scan_paths


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'memsearch_fast' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
