"""How a span file's chunk row packs its spans, format by format.

Format 2 (written since) keeps a span in 112 bytes at 128 held directions:
6-bit codes packed four to three bytes, the lines as offsets into the chunk,
a float16 scale, and the 8-byte key of its text. Six bits hold every set of
``benches.retrieval`` within a question or two where five lose a fact
(docs/store.md, "Fewer bits a component instead"). Format 1 (152 bytes: int8
codes, absolute lines, a float32 scale) is still read, so a file written
before is searched until the next write converts it
(:mod:`memsearch_fast.store.spans.upgrade`).

Whatever the format, a chunk's spans unpack to the same arrays: int8 codes
(within ±31 in format 2) and float32 scales whose product is the vector in
the held directions, so the kernels and the in-memory copy take either.
"""

from __future__ import annotations

import functools
import itertools
import re
import sqlite3
from typing import Any

import numpy as np

#: The largest code of format 2 (6 bits, signed).
TOP6 = 31

#: A collection name the file's table names may be built from (quoted, never escaped).
IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def packed_width(width: int) -> int:
    """Bytes of a format-2 code of *width* components (padded to four)."""
    return 3 * (-(-width // 4))


@functools.lru_cache(maxsize=16)
def record(width: int, fmt: int = 2) -> np.dtype:
    """One span as a chunk's row packs it: a fixed-size record, so a page of rows
    joined is one array."""
    if fmt == 1:
        return np.dtype(
            [
                ("index", "<i4"),
                ("start", "<i4"),
                ("end", "<i4"),
                ("scale", "<f4"),
                ("key", "<i8"),  # the text's content hash, as an integer
                ("code", "i1", (width,)),
            ]
        )
    return np.dtype(
        [
            ("index", "<u2"),
            ("start", "<u2"),  # lines past the chunk's first
            ("lines", "<u2"),  # lines past the span's first
            ("scale", "<f2"),
            ("key", "<i8"),
            ("code", "u1", (packed_width(width),)),
        ]
    )


def quantised6(m: np.ndarray, unit: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Rows of *m* as codes within ±31 and a scale each (the largest component is ±31);
    *unit*: rows made unit length first (not for codes of format 1 rounded again,
    whose scale already holds their length)."""
    m = np.asarray(m, dtype=np.float32)
    if unit:
        norms = np.linalg.norm(m, axis=1, keepdims=True) if m.size else np.ones((len(m), 1), np.float32)
        norms[norms == 0] = 1.0
        m = m / norms
    scale = np.abs(m).max(axis=1) / TOP6 if m.size else np.ones(len(m), np.float32)
    scale = np.where(scale == 0, 1.0, scale).astype(np.float16).astype(np.float32)
    scale[scale == 0] = np.float32(2.0**-24)  # below float16's range: the code saturates, the sign holds
    codes = np.clip(np.rint(m / scale[:, None]), -TOP6, TOP6).astype(np.int8)
    return codes, scale


def pack6(codes: np.ndarray) -> np.ndarray:
    """Codes within ±31, a row each, packed four to three bytes."""
    n, width = codes.shape
    pad = -width % 4
    c = np.asarray(codes, np.int8)
    if pad:
        c = np.concatenate([c, np.zeros((n, pad), np.int8)], axis=1)
    u = (c.view(np.uint8) & 63).reshape(n, -1, 4)
    a, b, d, e = u[..., 0], u[..., 1], u[..., 2], u[..., 3]
    out = np.empty((n, u.shape[1], 3), np.uint8)
    out[..., 0] = a | (b << 6)
    out[..., 1] = (b >> 2) | (d << 4)
    out[..., 2] = (d >> 4) | (e << 2)
    return out.reshape(n, -1)


def unpack6(packed: np.ndarray, width: int) -> np.ndarray:
    """:func:`pack6` undone: int8 codes of *width* components."""
    n = len(packed)
    p = np.asarray(packed, np.uint8).reshape(n, packed_width(width) // 3, 3)
    a, b, d = p[..., 0], p[..., 1], p[..., 2]
    u = np.empty((n, p.shape[1], 4), np.uint8)
    u[..., 0] = a & 63
    u[..., 1] = (a >> 6) | ((b & 15) << 2)
    u[..., 2] = (b >> 4) | ((d & 3) << 4)
    u[..., 3] = d >> 2
    signed = ((u << 2).view(np.int8) >> 2).reshape(n, 4 * p.shape[1])
    return np.ascontiguousarray(signed[:, :width])


class Spans:
    """Spans unpacked from a chunk's row, or from rows joined (*first*: each span's
    chunk's first line, which format 2's lines count from)."""

    __slots__ = ("codes", "ends", "index", "key_ints", "scales", "starts")

    def __init__(self, blob: bytes, n: int, width: int, fmt: int, first: Any) -> None:
        rec = record(width, fmt)
        if len(blob) != n * rec.itemsize:
            raise sqlite3.DatabaseError("a span row of the wrong size")
        r = np.frombuffer(blob, dtype=rec)
        self.key_ints = r["key"]
        if fmt == 1:
            self.index, self.starts, self.ends = r["index"], r["start"], r["end"]
            self.scales, self.codes = r["scale"], r["code"]
            return
        self.index = r["index"].astype(np.int32)
        self.starts = r["start"].astype(np.int32) + np.asarray(first, np.int32)
        self.ends = self.starts + r["lines"]
        self.scales = r["scale"].astype(np.float32)
        self.codes = unpack6(r["code"], width)


def pack(index: Any, starts: Any, ends: Any, keys: Any, codes: Any, scales: Any, first: int) -> bytes:
    """One chunk's spans (lines absolute, codes ±31 and their scales) as format 2
    packs them; *first*: the chunk's first line."""
    n = len(index)
    codes = np.asarray(codes, dtype=np.int8).reshape(n, -1) if n else np.zeros((0, 0), np.int8)
    r = np.empty(n, dtype=record(codes.shape[1], 2))
    if n:
        starts = np.asarray(starts, np.int64)
        r["index"] = np.asarray(index, np.int64)
        r["start"] = np.clip(starts - first, 0, 65535)
        r["lines"] = np.clip(np.asarray(ends, np.int64) - starts, 0, 65535)
        r["scale"] = np.asarray(scales, np.float32)
        r["key"] = keys
        r["code"] = pack6(codes)
    return r.tobytes()


def pack_chunks(
    index: Any, starts: Any, ends: Any, keys: Any, codes: Any, scales: Any, firsts: Any, counts: Any
) -> list[bytes]:
    """:func:`pack` for many chunks in one pass: the spans are given chunk after chunk
    (*counts* a chunk, each in span order), *firsts* their chunks' first lines; a chunk's
    bytes each. The same bytes as one call a chunk, without numpy's cost a call
    (a million chunks at 1 GB of journals)."""
    counts = np.asarray(counts, np.int64)
    n = int(counts.sum())
    if not n:
        return [b""] * len(counts)
    first = np.repeat(np.asarray(firsts, np.int64), counts)
    blob = pack(index, np.asarray(starts, np.int64) - first, np.asarray(ends, np.int64) - first, keys, codes, scales, 0)
    size = len(blob) // n
    bounds = (np.concatenate([[0], np.cumsum(counts)]) * size).tolist()
    return [blob[a:b] for a, b in itertools.pairwise(bounds)]


def chunk_key(chunk_hash: str) -> bytes | str:
    """A chunk's hash as format 2 stores it: hex digits (16 from the chunker, 64 in
    some other tool's ids) as their bytes, any other string as it is."""
    if 16 <= len(chunk_hash) <= 64 and not len(chunk_hash) % 2:
        try:
            raw = bytes.fromhex(chunk_hash)
        except ValueError:
            return chunk_hash
        if raw.hex() == chunk_hash:  # lower case only: the hex read back is the hash
            return raw
    return chunk_hash


def chunk_hash(stored: bytes | str) -> str:
    return stored.hex() if isinstance(stored, bytes) else str(stored)


def create_tables(db: sqlite3.Connection, collection: str) -> None:
    """A collection's tables of format 2: its files' paths, and a row a chunk."""
    db.execute(f'CREATE TABLE "{collection}__span_paths" (id INTEGER PRIMARY KEY, path TEXT UNIQUE NOT NULL)')
    db.execute(
        f'CREATE TABLE "{collection}__span_rows" (id INTEGER PRIMARY KEY, chunk UNIQUE NOT NULL, '
        "source INTEGER NOT NULL, start_line INTEGER, end_line INTEGER, n INTEGER NOT NULL, data BLOB NOT NULL)"
    )
    db.execute(f'CREATE INDEX "{collection}__span_row_sources" ON "{collection}__span_rows" (source)')
