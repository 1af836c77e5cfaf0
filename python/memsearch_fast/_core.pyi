"""Type stubs for the Rust extension ``memsearch_fast._core``."""

import os
from collections.abc import Sequence
from typing import final

__all__ = [
    "CHUNK_AMPLIFY",
    "CHUNK_SLACK_CHUNKS",
    "Chunk",
    "ChunkStream",
    "FileChunks",
    "ScannedFile",
    "__version__",
    "base64_answer",
    "best_groups",
    "best_in_groups",
    "chunk_files",
    "chunk_markdown",
    "clean_content_for_embedding",
    "compute_chunk_id",
    "content_hash",
    "cut_spans",
    "cut_spans_columns",
    "decode_base64_rows",
    "heading_levels",
    "join_records",
    "scan_paths",
]

__version__: str
#: A document's chunks hold at most this many times its bytes (plus
#: CHUNK_SLACK_CHUNKS chunks of the maximum size); past it, no overlap.
CHUNK_AMPLIFY: int
CHUNK_SLACK_CHUNKS: int

@final
class ScannedFile:
    def __new__(
        cls, path: str | os.PathLike[str], mtime: float, size: int, ino: int = 0, ctime: float = 0.0
    ) -> ScannedFile: ...
    @property
    def path(self) -> str: ...
    @property
    def mtime(self) -> float: ...
    @property
    def size(self) -> int: ...
    @property
    def ino(self) -> int: ...
    @property
    def ctime(self) -> float: ...
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
    def ino(self) -> int: ...
    @property
    def ctime(self) -> float: ...
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
) -> tuple[list[ScannedFile], list[tuple[str, str]], list[str], list[tuple[str, int]]]: ...
def chunk_markdown(text: str, source: str = "", *, max_chunk_size: int, overlap_lines: int) -> list[Chunk]: ...
def chunk_files(
    files: list[str],
    *,
    max_chunk_size: int,
    overlap_lines: int,
    workers: int,
    batch_chunks: int = 2048,
    max_files: int = 4096,
    max_file_bytes: int = 0,
) -> ChunkStream: ...
def compute_chunk_id(source: str, start_line: int, end_line: int, content_hash: str, model: str) -> str: ...
def content_hash(text: str) -> str: ...
def decode_base64_rows(text: str, row_len: int) -> bytes: ...
def base64_answer(body: bytes, n: int) -> bytes | None: ...
def join_records(items: Sequence[bytes | str], record: int) -> bytes: ...
def cut_spans(
    chunks: list[tuple[str, str, int]], *, budget: int, min_chunk: int, min_sentence: int, first: int
) -> list[list[tuple[int, int, int, str, str]]]: ...
def cut_spans_columns(
    chunks: list[tuple[str, str, int]], *, budget: int, min_chunk: int, min_sentence: int, first: int
) -> tuple[list[int], bytes, bytes, bytes, list[str], list[str]]: ...
def clean_content_for_embedding(text: str) -> str: ...
def heading_levels(lines: list[str]) -> list[int]: ...
def best_groups(
    codes: bytes,
    dim: int,
    scales: bytes,
    offsets: bytes,
    query: list[float],
    k: int,
    signs: bytes | None = None,
    shortlist: int = 0,
) -> list[tuple[int, int, float]]: ...
def best_in_groups(
    codes: bytes, dim: int, scales: bytes, offsets: bytes, query: list[float], groups: list[int]
) -> list[tuple[int, int, float]]: ...
