"""What the manifest says of the indexed files, and a hit's display fields read
again from its markdown file.

Milvus Lite 2.5 finds rows by primary key with a scan of the collection:
434 ms for the rows of 30 hits at 1.2 M chunks (docs/scale.md). The markdown
files are the source of truth, and the manifest records each file's
fingerprint (xxh3 of its bytes) as it was when its rows were written. A file
whose fingerprint is still the recorded one is chunked again with the
collection's settings (a few milliseconds) and the hit's chunk found by its
id, which names its source, lines, content and model: the fields are then
exactly the stored ones. Any other file (changed, gone, unreadable, no longer
holding the chunk) leaves its hits to Milvus.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from memsearch_fast.store.schema import QUERY_FIELDS


@dataclass(slots=True)
class Described:
    """A manifest read once: its row count, each file's packed chunk records
    (what a copy compares to see which files changed), and what reading a
    file again needs: each file's fingerprint and the run's model and chunk settings."""

    rows: int
    entries: dict[str, str]
    fingerprints: dict[str, tuple[int, str]] = field(default_factory=dict)  # (size, xxh3) a file
    model: str = ""
    max_chunk_size: int = 0
    overlap_lines: int = 0


def read_manifest(path: Path, *, files: bool = False) -> Described | None:
    """The manifest at *path* (never through a link, nor another user's file), or None;
    with *files*, the fingerprints and settings too."""
    from memsearch_fast._os import open_private

    try:
        fd = open_private(path, os.O_RDONLY, single_link=False)
        with os.fdopen(fd, "rb") as f:
            data = orjson.loads(f.read())
        rows, listed = int(data["rows"]), data["files"]
        out = Described(rows, {str(k): str(v[3]) for k, v in listed.items()})
        if files:
            out.fingerprints = {str(k): (int(v[0]), str(v[2])) for k, v in listed.items() if v[2] and v[0] >= 0}
            out.model = str(data["model"])
            out.max_chunk_size, out.overlap_lines = int(data["max_chunk_size"]), int(data["overlap_lines"])
        return out
    except (OSError, ValueError, KeyError, TypeError, IndexError, AttributeError):
        return None


def rows_from_files(described: Described, wanted: dict[str, str]) -> dict[str, dict[str, Any]]:
    """The display fields of the chunks *wanted* ({chunk id: source}) whose files are
    as the manifest recorded them, in :data:`QUERY_FIELDS` order; the others are left out."""
    by_source: dict[str, set[str]] = {}
    for cid, source in wanted.items():
        if source in described.fingerprints:
            by_source.setdefault(source, set()).add(cid)
    if not by_source or not described.model or described.max_chunk_size <= 0:
        return {}
    from memsearch_fast._core import chunk_files

    out: dict[str, dict[str, Any]] = {}
    batches = chunk_files(
        sorted(by_source),
        max_chunk_size=described.max_chunk_size,
        overlap_lines=described.overlap_lines,
        workers=min(2, len(by_source)),
        max_file_bytes=max(described.fingerprints[s][0] for s in by_source) + 1,  # nothing larger than indexed
    )
    for batch in batches:
        for fc in batch:
            ids = by_source.get(fc.path)
            if ids is None or fc.error or (fc.size, fc.fingerprint) != described.fingerprints.get(fc.path):
                continue
            for chunk in fc.chunks:
                cid = chunk.chunk_id(described.model)
                if cid in ids:
                    row = {
                        "content": chunk.content,
                        "source": fc.path,
                        "heading": chunk.heading,
                        "chunk_hash": cid,
                        "heading_level": chunk.heading_level,
                        "start_line": chunk.start_line,
                        "end_line": chunk.end_line,
                    }
                    out[cid] = {f: row[f] for f in QUERY_FIELDS}
    return out
