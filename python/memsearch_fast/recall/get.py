"""Get: lines of an indexed markdown file (OpenClaw's ``memory_get``).

Only files the index knows may be read: the path is resolved (symlinks
included) and the real path must be a ``source`` stored in the collection, so
``../`` traversal, a symlink pointing elsewhere, or a file never indexed are
refused. The file is read from disk, the source of truth, and split on
``"\\n"`` as the chunker splits it, so line numbers agree with search hits.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memsearch_fast.errors import MemsearchError

if TYPE_CHECKING:
    from memsearch_fast.index.protocol import IndexStore


class GetError(MemsearchError):
    """The path is not an indexed source, or it cannot be read (one-line message)."""


def real_path(path: str | os.PathLike[str]) -> str:
    """The absolute path with ``~``, ``..`` and every symlink resolved."""
    return os.path.realpath(os.path.expanduser(os.fspath(path)))


def is_indexed(store: IndexStore, source: str) -> bool:
    """Whether ``source`` is stored in the collection (the store escapes the filter value)."""
    rows = store.iter_ids_by_source([source])
    try:
        return next(rows, None) is not None
    finally:
        rows.close()


def read_lines(source: str, *, start: int = 1, count: int | None = None, shown: str | None = None) -> dict[str, Any]:
    """Lines ``start`` .. ``start + count - 1`` (1-based; all from ``start`` when
    ``count`` is None): keys path, from, lines (how many were returned),
    total_lines, content."""
    if start < 1:
        raise ValueError(f"--from must be >= 1, not {start}")
    if count is not None and count < 0:
        raise ValueError(f"--lines must be >= 0, not {count}")
    try:
        data = Path(source).read_bytes()
    except FileNotFoundError:
        raise GetError(f"indexed file no longer exists: {shown or source}") from None
    except OSError as exc:
        raise GetError(f"cannot read {shown or source}: {exc.strerror or exc}") from None
    lines = data.decode("utf-8", errors="replace").split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # a final newline ends the last line; it does not start another
    end = len(lines) if count is None else start - 1 + count
    picked = lines[start - 1 : end]
    return {
        "path": source,
        "from": start,
        "lines": len(picked),
        "total_lines": len(lines),
        "content": "\n".join(picked),
    }


__all__ = ["GetError", "is_indexed", "read_lines", "real_path"]
