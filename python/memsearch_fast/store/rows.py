"""Row limits and the splitting of rows whose content exceeds them."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Any

#: Largest ``content`` a row may carry, in UTF-8 bytes. Milvus server counts
#: VARCHAR length in bytes (Milvus Lite 3.x in characters), so bytes are the
#: safe unit. Longer content is split by :func:`split_long_rows`.
MAX_CONTENT_BYTES = 65535


MAX_SOURCE_BYTES = 1024


MAX_HEADING_BYTES = 1024


def utf8_cut(text: str, max_bytes: int) -> int:
    """Length in characters of the longest prefix of ``text`` within ``max_bytes``."""
    raw = text.encode("utf-8")[:max_bytes]
    return len(raw.decode("utf-8", errors="ignore"))


def _split_text(text: str, max_bytes: int) -> list[tuple[str, int]]:
    """Split ``text`` into parts of at most ``max_bytes``; returns (part, first line offset).

    Parts end on line boundaries when possible; a single over-long line is cut
    on a character boundary.
    """
    parts: list[tuple[str, int]] = []
    buf: list[str] = []
    buf_bytes = 0
    buf_line = 0
    for line_no, line in enumerate(text.splitlines(keepends=True)):
        size = len(line.encode("utf-8"))
        if buf and buf_bytes + size > max_bytes:
            parts.append(("".join(buf), buf_line))
            buf, buf_bytes = [], 0
        if not buf:
            buf_line = line_no
        rest = line
        while size > max_bytes:
            cut = utf8_cut(rest, max_bytes)
            parts.append((rest[:cut], line_no))
            rest = rest[cut:]
            size = len(rest.encode("utf-8"))
        if rest:
            buf.append(rest)
            buf_bytes += size
    if buf:
        parts.append(("".join(buf), buf_line))
    return parts


def split_long_rows(rows: Iterable[dict[str, Any]], max_bytes: int = MAX_CONTENT_BYTES) -> list[dict[str, Any]]:
    """Split rows whose ``content`` exceeds ``max_bytes`` into several rows.

    Each part keeps the row's source, heading and embedding, gets the line
    range it covers, and a deterministic id ``sha256("<chunk_hash>#<i>")`` so
    re-indexing the same file yields the same ids. :meth:`MilvusStore.upsert`
    applies this itself; the pipeline may call it first so that the ids it
    diffs against the store are the ones actually stored.
    """
    out: list[dict[str, Any]] = []
    for row in rows:
        content = row.get("content") or ""
        if len(content) * 4 <= max_bytes or len(content.encode("utf-8")) <= max_bytes:
            out.append(row)
            continue
        start = int(row.get("start_line") or 0)
        end = int(row.get("end_line") or start)
        for i, (part, line_off) in enumerate(_split_text(content, max_bytes)):
            piece = dict(row)
            piece["content"] = part
            piece["chunk_hash"] = hashlib.sha256(f"{row['chunk_hash']}#{i}".encode()).hexdigest()
            first = start + line_off
            last = first + max(part.count("\n") - (1 if part.endswith("\n") else 0), 0)
            piece["start_line"] = min(first, end)
            piece["end_line"] = min(last, end)
            out.append(piece)
    return out
