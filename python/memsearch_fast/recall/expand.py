"""Expand: a stored chunk plus its context, read back from the markdown file.

The file is the source of truth, so the context comes from disk, not the
index: the chunk's whole heading section (found with the same fence-aware
heading rule as the chunker) or N lines around it. Session anchors
(``<!-- session:… turn:… transcript:… -->``) in that context are parsed so
an agent can go on to ``memsearch transcript``.

As with ``get``, only indexed files are read: a source that has become a
symbolic link is followed only when the file it leads to is itself indexed,
so a link that replaced an indexed file cannot show what lies outside the
indexed roots.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from memsearch_fast._core import heading_levels
from memsearch_fast.errors import MemsearchError

ANCHOR_RE = re.compile(r"<!--\s*session:(\S+)\s+turn:(\S+)\s+transcript:(\S+)\s*-->")
#: The other anchors journals hold: 0.4.23's Codex plugin (``session:… rollout:PATH``) and its
#: OpenCode plugin (``session:… turn:… db:PATH``).
OTHER_ANCHOR_RE = re.compile(r"<!--\s*session:(\S+)(?:\s+turn:(\S*))?\s+(rollout|db):(\S+)\s*-->")

#: The longest line shown whole in an expansion; a longer one (a 20 MB single
#: line) is cut around the chunk's part of it.
MAX_LINE_CHARS = 20_000

#: Characters kept on each side of the chunk's text in a cut line.
CLIP_CONTEXT = 2_000


class ExpandError(MemsearchError):
    """The chunk's file is gone or unreadable (one-line message)."""


def section_bounds(lines: list[str], start_line: int, heading_level: int) -> tuple[int, int]:
    """0-based [start, end) of the section holding a chunk that starts at
    1-based `start_line`: back to its heading, forward to the next heading of
    the same or a higher level."""
    start = max(0, start_line - 1)
    end = len(lines)
    if heading_level <= 0:
        return min(start, len(lines)), end
    levels = heading_levels(lines)
    for i in range(min(start_line, len(lines)) - 1, -1, -1):
        if 0 < levels[i] <= heading_level:
            start = i
            break
    for i in range(start_line, len(lines)):
        if 0 < levels[i] <= heading_level:
            end = i
            break
    return start, end


def clip_lines(lines: list[str], chunk: str) -> tuple[list[str], int]:
    """The lines with each one longer than :data:`MAX_LINE_CHARS` cut to the
    part that holds the chunk's text (or its start) and :data:`CLIP_CONTEXT`
    characters around it, marked where cut; and how many characters were cut.
    A chunk of a 20 MB single line prints a few KB, not the 20 MB."""
    if all(len(line) <= MAX_LINE_CHARS for line in lines):
        return lines, 0
    needle = max(chunk.split("\n"), key=len).strip()[:200] if chunk else ""
    out: list[str] = []
    clipped = 0
    for line in lines:
        if len(line) <= MAX_LINE_CHARS:
            out.append(line)
            continue
        pos = line.find(needle) if needle else -1
        if pos < 0:
            a, b = 0, CLIP_CONTEXT * 2
        else:
            a, b = max(0, pos - CLIP_CONTEXT), min(len(line), pos + len(chunk) + CLIP_CONTEXT)
        head = f"[… {a:,} characters not shown] " if a else ""
        tail = f" [… {len(line) - b:,} characters not shown]" if b < len(line) else ""
        out.append(f"{head}{line[a:b]}{tail}")
        clipped += len(line) - (b - a)
    return out, clipped


def file_lines(data: bytes) -> list[str]:
    """The file's lines as 0.4.23's expand shows them: a final newline ends the
    last line rather than starting an empty one, and a CRLF line ends in no
    ``\r``. Split on ``\n`` only, as the chunker counts, so line numbers agree."""
    text = data.decode("utf-8", errors="replace")
    if not text:
        return []
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def parse_anchor(text: str) -> dict[str, str]:
    """The first anchor in *text*: session, turn and where the conversation is (``transcript``;
    ``kind`` says ``rollout`` or ``db`` for those anchors), or {}."""
    m = ANCHOR_RE.search(text)
    other = OTHER_ANCHOR_RE.search(text)
    if m and not (other and other.start() < m.start()):
        return {"session": m.group(1), "turn": m.group(2), "transcript": m.group(3)}
    if other:
        return {
            "session": other.group(1),
            "turn": other.group(2) or "",
            "transcript": other.group(4),
            "kind": other.group(3),
        }
    return {}


def expand_chunk(
    row: dict[str, Any],
    *,
    section: bool = True,
    lines: int | None = None,
    indexed: Callable[[str], bool] | None = None,
) -> dict[str, Any]:
    """Context for a stored row: keys chunk_hash, source, heading,
    start_line, end_line, content, anchor (when found), warning (when the
    index is behind the file), clipped (characters of over-long lines not
    shown, when any: see :func:`clip_lines`)."""
    source = row["source"]
    path = Path(source)
    real = os.path.realpath(source)
    if real != source and not (indexed is not None and indexed(real)):
        raise ExpandError(
            f"{source} now leads to {real}, which is not indexed; refusing to read it (run 'memsearch index')"
        )
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise ExpandError(f"source file not found: {source}") from None
    except OSError as exc:
        raise ExpandError(f"cannot read {source}: {exc.strerror or exc}") from None
    all_lines = file_lines(data)
    start_line, end_line = int(row["start_line"]), int(row["end_line"])
    result: dict[str, Any] = {"chunk_hash": row["chunk_hash"], "source": source, "heading": row.get("heading", "")}
    if start_line > len(all_lines):
        result["warning"] = (
            f"chunk starts at line {start_line} but {source} has {len(all_lines)} lines; "
            "the index is behind the file (run 'memsearch index' to refresh it)"
        )
    if lines is None and not section:
        lines = 0
    if lines is not None:
        lo = max(0, start_line - 1 - max(0, lines))
        hi = min(len(all_lines), end_line + max(0, lines))
    else:
        lo, hi = section_bounds(all_lines, start_line, int(row.get("heading_level", 0) or 0))
    shown, clipped = clip_lines(all_lines[lo:hi], str(row.get("content") or ""))
    text = "\n".join(shown)
    result.update(start_line=lo + 1, end_line=hi, content=text)
    if clipped:
        result["clipped"] = clipped
    anchor = parse_anchor(text)
    if anchor:
        result["anchor"] = anchor
    return result


__all__ = ["ExpandError", "clip_lines", "expand_chunk", "file_lines", "parse_anchor", "section_bounds"]
