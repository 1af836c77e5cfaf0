"""Chunk stage: markdown text → chunks with line ranges and content hashes.

Chunking, hashing and file reading run in Rust on a thread pool with the GIL
released; this module only chooses defaults and documents the contract.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator

from memsearch_fast._core import (
    Chunk,
    FileChunks,
    clean_content_for_embedding,
    compute_chunk_id,
    content_hash,
)
from memsearch_fast._core import chunk_files as _chunk_files
from memsearch_fast._core import chunk_markdown as _chunk_markdown
from memsearch_fast.config.schema import DEFAULT_MAX_CHUNK_SIZE, DEFAULT_OVERLAP_LINES
from memsearch_fast.parallelism import plan

__all__ = [
    "Chunk",
    "FileChunks",
    "chunk_files",
    "chunk_markdown",
    "clean_content_for_embedding",
    "compute_chunk_id",
    "content_hash",
]


def chunk_markdown(
    text: str,
    source: str = "",
    *,
    max_chunk_size: int = DEFAULT_MAX_CHUNK_SIZE,
    overlap_lines: int = DEFAULT_OVERLAP_LINES,
) -> list[Chunk]:
    """Split *text* at headings, then paragraphs, lines and sentences.

    Identical to memsearch 0.4.23's chunker except that a line inside a
    fenced code block is never a heading.
    """
    return _chunk_markdown(text, source, max_chunk_size=max_chunk_size, overlap_lines=overlap_lines)


def chunk_files(
    files: Iterable[str | os.PathLike[str]],
    *,
    max_chunk_size: int = DEFAULT_MAX_CHUNK_SIZE,
    overlap_lines: int = DEFAULT_OVERLAP_LINES,
    workers: int | None = None,
    batch_chunks: int = 2048,
    max_file_bytes: int | None = None,
) -> Iterator[list[FileChunks]]:
    """Read, chunk and hash *files* in parallel, yielding bounded batches.

    Each batch holds whole files and at least *batch_chunks* chunks (except
    the last). A file that cannot be read yields a ``FileChunks`` with
    ``error`` set; invalid UTF-8 is decoded with replacement characters and
    flagged with ``invalid_utf8``. Files come out in input order; workers
    read at most ``16 × workers`` files ahead of the consumer, so memory
    stays bounded for any corpus size. A file over *max_file_bytes* (default
    :func:`max_file_bytes`) yields an error instead of its chunks.
    """
    paths = [os.fspath(f) for f in files]
    return _chunk_files(
        paths,
        max_chunk_size=max_chunk_size,
        overlap_lines=overlap_lines,
        workers=workers or plan().chunk_threads,
        batch_chunks=batch_chunks,
        max_file_bytes=max_file_bytes if max_file_bytes is not None else max_file_limit(),
    )


#: The largest file indexed, in MiB: a file's chunks are held together, and a
#: 17 MB single-line file already costs ~650 MB. ``MEMSEARCH_MAX_FILE_MB``
#: changes it (0: no limit).
DEFAULT_MAX_FILE_MB = 16


def max_file_limit() -> int:
    """The per-file limit in bytes (0: none), from ``MEMSEARCH_MAX_FILE_MB``."""
    from memsearch_fast.config import environment

    mb = environment.number("MEMSEARCH_MAX_FILE_MB", DEFAULT_MAX_FILE_MB)  # below 0: 0 (none)
    return int(mb * (1 << 20))
