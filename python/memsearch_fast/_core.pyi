"""Type stubs for the Rust extension ``memsearch_fast._core``."""

import os
from typing import final

__all__ = [
    "__version__",
    "ScannedFile",
    "Chunk",
    "FileChunks",
    "ChunkStream",
    "scan_paths",
    "chunk_markdown",
    "chunk_files",
    "compute_chunk_id",
    "content_hash",
    "clean_content_for_embedding",
]

__version__: str

@final
class ScannedFile:
    def __new__(cls, path: str | os.PathLike[str], mtime: float, size: int) -> ScannedFile: ...
    @property
    def path(self) -> str: ...
    @property
    def mtime(self) -> float: ...
    @property
    def size(self) -> int: ...
    def __fspath__(self) -> str: ...

@final
class Chunk:
    @property
    def content(self) -> str: ...
    @property
    def source(self) -> str: ...
    @property
    def heading(self) -> str: ...
    @property
    def heading_level(self) -> int: ...
    @property
    def start_line(self) -> int: ...
    @property
    def end_line(self) -> int: ...
    @property
    def content_hash(self) -> str: ...
    def chunk_id(self, model: str) -> str: ...

@final
class FileChunks:
    @property
    def path(self) -> str: ...
    @property
    def size(self) -> int: ...
    @property
    def mtime(self) -> float: ...
    @property
    def fingerprint(self) -> str: ...
    @property
    def chunks(self) -> list[Chunk]: ...
    @property
    def error(self) -> str | None: ...
    @property
    def invalid_utf8(self) -> bool: ...

@final
class ChunkStream:
    def __iter__(self) -> ChunkStream: ...
    def __next__(self) -> list[FileChunks]: ...

def scan_paths(
    paths: list[str],
    extensions: list[str],
    ignore_hidden: bool,
    ignore_files: list[str],
    exclude: list[str],
) -> tuple[list[ScannedFile], list[str], list[str]]: ...
def chunk_markdown(
    text: str, source: str = "", *, max_chunk_size: int = 1500, overlap_lines: int = 2
) -> list[Chunk]: ...
def chunk_files(
    files: list[str],
    *,
    max_chunk_size: int = 1500,
    overlap_lines: int = 2,
    workers: int = 1,
    batch_chunks: int = 2048,
    max_files: int = 4096,
) -> ChunkStream: ...
def compute_chunk_id(source: str, start_line: int, end_line: int, content_hash: str, model: str) -> str: ...
def content_hash(text: str) -> str: ...
def clean_content_for_embedding(text: str) -> str: ...
