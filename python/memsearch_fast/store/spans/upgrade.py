"""Spans stored again without embedding anything again: a file of format 1
converted in place (:func:`convert`), a companion collection of the database
moved into the file (:func:`adopt`), and spans kept in every dimension stored
along fitted directions once there are enough of them (:func:`refit`).

Format 1 kept int8 codes, absolute lines and a float32 scale in 152 bytes a
span, and a table of every span's text key; format 2 keeps 112 (docs/store.md,
"The span file's format 2"). The codes are rounded again to 6 bits from the
stored 8, as ``benches.span_bits`` measured (recall held on every set).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from memsearch_fast.store.spans import layout

if TYPE_CHECKING:
    from memsearch_fast.store.spans.basis import Basis
    from memsearch_fast.store.spans.collection import SpanStore


class Stored(Protocol):
    """What a span file offers the moves here (:class:`memsearch_fast.store.spans.file.SpanFile`)."""

    @property
    def exists(self) -> bool: ...
    def count(self) -> int: ...
    def drop(self) -> None: ...
    def _create(self, basis: Basis | None, refused: bool = False) -> bool: ...
    def put(self, span_rows: list[dict[str, Any]], own_rows: list[dict[str, Any]], *, replace: bool = True) -> int: ...
    def iter_vectors(
        self, sources: list[str] | None = None, *, lifted: bool = True
    ) -> Iterator[list[dict[str, Any]]]: ...
    def _pages(self) -> Iterator[list[tuple[Any, ...]]]: ...


#: Chunk rows converted a statement at a time.
PAGE = 500


def convert(db: sqlite3.Connection) -> int:
    """Every collection of a format-1 file in *db* stored again in format 2, inside
    the caller's transaction (the caller sets the format); the spans converted."""
    from memsearch_fast.store.spans.basis import read

    done = 0
    for name, dim, basis in db.execute("SELECT name, dim, basis FROM collections").fetchall():
        if not layout.IDENTIFIER.fullmatch(str(name)):
            continue  # no collection of ours (a span file opens its own only)
        fitted = read(str(basis)) if basis else None
        width = fitted.dims if fitted is not None else int(dim)
        old = f'"{name}__span_chunks"'
        present = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?"
        if not db.execute(present, (f"{name}__span_chunks",)).fetchone():
            continue
        db.execute(f'DROP TABLE IF EXISTS "{name}__span_rows"')
        db.execute(f'DROP TABLE IF EXISTS "{name}__span_paths"')
        layout.create_tables(db, str(name))
        db.execute(f'INSERT INTO "{name}__span_paths" (path) SELECT DISTINCT source FROM {old} ORDER BY source')
        paths = dict(db.execute(f'SELECT path, id FROM "{name}__span_paths"').fetchall())
        last = -1
        while True:
            page = db.execute(
                f"SELECT id, chunk, source, start_line, end_line, n, data FROM {old} WHERE id > ? ORDER BY id LIMIT ?",
                (last, PAGE),
            ).fetchall()
            if not page:
                break
            last = page[-1][0]
            rows = [
                (rid, cid, paths[source], start, end, n, _again(data, n, width, start))
                for rid, cid, source, start, end, n, data in page
            ]
            # The rows keep their ids: a reader paging through the file goes on where it was.
            db.executemany(
                f'INSERT INTO "{name}__span_rows" (id, chunk, source, start_line, end_line, n, data) '
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                [(rid, layout.chunk_key(str(cid)), *rest) for rid, cid, *rest in rows if rest[-1] is not None],
            )
            done += sum(int(r[5]) for r in rows if r[-1] is not None)
        db.execute(f"DROP TABLE {old}")
        db.execute(f'DROP TABLE IF EXISTS "{name}__span_texts"')
    return done


def _again(blob: bytes, n: int, width: int, start: int | None) -> bytes | None:
    """One chunk's spans of format 1 packed as format 2 (codes rounded to 6 bits);
    None for a damaged row, left out (the chunk is searched by its own vector)."""
    first = int(start or 0)
    try:
        s = layout.Spans(blob, int(n), width, 1, first)
    except (sqlite3.DatabaseError, TypeError, ValueError):
        return None
    if not n:
        return b""
    again, scales = layout.quantised6(s.codes.astype(np.float32) * s.scales[:, None], unit=False)
    return layout.pack(s.index, s.starts, s.ends, s.key_ints, again, scales, first)


def adopt(spans: Stored, legacy: SpanStore) -> int:
    """Move the spans of *legacy* (a span collection of this database, made
    before they lived in a file) into *spans*, then drop it; the chunks moved.
    Its vectors are taken as stored: nothing is embedded again."""
    if not legacy.present() or not legacy.exists:
        return 0
    basis = legacy.basis
    if spans.exists:
        spans.drop()
    spans._create(basis, refused=getattr(legacy, "_refused", False))
    own: dict[str, dict[str, Any]] = {}  # a chunk with its row 0 has all its spans
    for page in legacy.iter_rows():
        own.update((str(r["chunk_hash"]), r) for r in page if str(r["span_id"]).endswith(":0"))
    sources = sorted({str(o["source"]) for o in own.values()})
    moved = 0
    for i in range(0, len(sources), 64):  # every span of these files at once: a chunk lands whole
        rows = [r for page in legacy.iter_vectors(sources[i : i + 64]) for r in page if r["chunk_hash"] in own]
        chunks = list(dict.fromkeys(str(r["chunk_hash"]) for r in rows))
        spans.put(rows, [own[c] for c in chunks])
        moved += len(chunks)
    legacy.drop()
    return moved


def refit(spans: Stored) -> bool:
    """*spans*, kept in every dimension, stored again along directions fitted on
    them (:mod:`memsearch_fast.store.spans.basis`) when their number is in range
    (the caller holds the file's lock)."""
    from memsearch_fast.store.spans import basis as span_basis
    from memsearch_fast.store.spans.reads import _row

    if not span_basis.FIT_ROWS <= spans.count() <= span_basis.REFIT_MAX:
        return False
    rows = [r for page in spans.iter_vectors() for r in page]
    basis = span_basis.fit([r["embedding"] for r in rows])
    if basis is None:
        return False
    chunks = [r[:4] for page in spans._pages() for r in page]
    spans.drop()
    spans._create(basis)
    spans.put(rows, [_row(c, s, 0, a, b, "") for c, s, a, b in chunks])  # each row keeps its text key
    return True
