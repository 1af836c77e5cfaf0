"""The span file's row layout (:mod:`memsearch_fast.store.spans.layout`) and a file of
the format before it, read and then converted by its next write
(:mod:`memsearch_fast.store.spans.upgrade`). Real Milvus Lite and SQLite."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pytest

from memsearch_fast import MemSearch
from memsearch_fast.index import run as index_run
from memsearch_fast.store.milvus import MilvusStore
from memsearch_fast.store.spans import basis as span_basis
from memsearch_fast.store.spans import layout
from memsearch_fast.store.spans.file import path_of
from tests.test_span_file import DIM, rows
from tests.test_spans import index, recorded, spanned
from tests.test_spans import notes as notes  # a fixture


def test_codes_pack_four_to_three_bytes_and_come_back() -> None:
    rng = np.random.default_rng(3)
    for width in (1, 4, 7, 16, 128, 384):
        codes = rng.integers(-31, 32, size=(9, width)).astype(np.int8)
        codes[0], codes[1] = 31, -31  # the extremes of six bits
        packed = layout.pack6(codes)
        assert packed.shape == (9, layout.packed_width(width)) and layout.packed_width(128) == 96
        assert np.array_equal(layout.unpack6(packed, width), codes)
    m = rng.normal(size=(50, 128)).astype(np.float32)
    codes, scales = layout.quantised6(m)
    assert np.abs(codes).max() == 31 and scales.dtype == np.float32
    back = codes * scales[:, None]
    cosines = (back * m).sum(axis=1) / np.linalg.norm(back, axis=1) / np.linalg.norm(m, axis=1)
    assert cosines.min() > 0.998  # six bits a component keep a vector's direction
    assert layout.record(128).itemsize == 112 < layout.record(128, 1).itemsize == 152
    assert layout.chunk_key("00ff00ff00ff00ff") == bytes.fromhex("00ff00ff00ff00ff")
    for other in ("00FF00FF00FF00FF", "not hex at all!!", "abc"):
        assert layout.chunk_key(other) == other and layout.chunk_hash(layout.chunk_key(other)) == other


def _as_format_1(path: str, collection: str) -> None:
    """Write *path*'s spans again as a build of format 1 did: int8 codes (these are
    the 6-bit ones times four, so the vectors are the same), absolute lines, the
    source as text, a table of every span's text key."""
    db = sqlite3.connect(path)
    with db:
        rows2 = db.execute(
            f'SELECT r.chunk, p.path, r.start_line, r.end_line, r.n, r.data FROM "{collection}__span_rows" r '
            f'JOIN "{collection}__span_paths" p ON p.id = r.source ORDER BY r.id'
        ).fetchall()
        dim, basis = db.execute("SELECT dim, basis FROM collections WHERE name = ?", (collection,)).fetchone()
        width = span_basis.read(basis).dims if basis else dim
        rec1 = layout.record(width, 1)
        db.execute(f'DROP TABLE "{collection}__span_rows"')
        db.execute(f'DROP TABLE "{collection}__span_paths"')
        chunks, texts = f'"{collection}__span_chunks"', f'"{collection}__span_texts"'
        db.execute(
            f"CREATE TABLE {chunks} (id INTEGER PRIMARY KEY, chunk TEXT UNIQUE NOT NULL, source TEXT NOT NULL, "
            "start_line INTEGER, end_line INTEGER, n INTEGER NOT NULL, data BLOB NOT NULL)"
        )
        db.execute(f'CREATE INDEX "{collection}__span_sources" ON {chunks} (source)')
        db.execute(f"CREATE TABLE {texts} (key INTEGER NOT NULL, chunk INTEGER NOT NULL, PRIMARY KEY (key, chunk))")
        for k, (chunk, source, start, end, n, data) in enumerate(rows2):
            s = layout.Spans(data, n, width, 2, start)
            r = np.empty(n, rec1)
            r["index"], r["start"], r["end"], r["key"] = s.index, s.starts, s.ends, s.key_ints
            r["code"], r["scale"] = s.codes * 4, s.scales / 4
            cur = db.execute(
                f"INSERT INTO {chunks} (id, chunk, source, start_line, end_line, n, data) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (3 * k + 7, layout.chunk_hash(chunk), source, start, end, n, r.tobytes()),  # ids with gaps
            )
            keys = ((int(k), cur.lastrowid) for k in s.key_ints)
            db.executemany(f"INSERT OR IGNORE INTO {texts} VALUES (?, ?)", keys)
    db.execute("PRAGMA user_version=1")
    db.close()


def _listing(spans) -> list[tuple]:
    return sorted(
        (r["span_id"], r["source"], r["text_hash"], r["start_line"], r["end_line"])
        for page in spans.iter_rows()
        for r in page
    )


def test_a_file_of_format_1_is_read_and_converted_by_its_next_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(span_basis, "DIMS", 16)
    monkeypatch.setattr(span_basis, "FIT_ROWS", 200)
    db = str(tmp_path / "m.db")
    span_rows, own = rows(60, 8)
    queries = [list(span_rows[i]["embedding"]) for i in (5, 77, 301)]
    with MilvusStore(db, collection="notes", dimension=DIM) as store:
        store.spans.create([r["embedding"] for r in span_rows])
        store.spans.put(span_rows, own)
        listing, counts = _listing(store.spans), store.spans.counts()
        found = [store.spans.search(q, 10, None) for q in queries]
    _as_format_1(path_of(db), "notes")
    with (
        MilvusStore(db, collection="notes", dimension=DIM) as store,
        MilvusStore(db, collection="notes", dimension=DIM) as reader,
    ):
        spans = store.spans
        # Read as it is: the same spans, lines and text keys, the same hits and scores.
        assert reader.spans.exists and reader.spans._fmt == 1
        assert _listing(reader.spans) == listing and reader.spans.counts() == counts
        for q, hits in zip(queries, found, strict=True):
            assert reader.spans.search(q, 10, None) == pytest.approx(hits)
        target = span_rows[77]
        assert set(reader.spans.vectors_for([target["text_hash"]], [target["source"]])) == {target["text_hash"]}
        # The next write converts it, in its own transaction: nothing lost, nothing embedded.
        spans.delete_chunks([own[0]["chunk_hash"]])
        assert spans._fmt == 2
        assert _listing(spans) == [r for r in listing if not r[0].startswith(own[0]["chunk_hash"])]
        tables = {t for (t,) in sqlite3.connect(path_of(db)).execute("SELECT name FROM sqlite_master")}
        assert not {"notes__span_chunks", "notes__span_texts"} & tables and "notes__span_rows" in tables
        for q, hits in zip(queries, found, strict=True):  # codes rounded to six bits from eight: the same order
            again = spans.search(q, 10, None)
            kept = [h for h in hits if h["chunk_hash"] != own[0]["chunk_hash"]]
            assert [h["span_id"] for h in again[:5]] == [h["span_id"] for h in kept[:5]]
            assert [h["distance"] for h in again[: len(kept)]] == pytest.approx([h["distance"] for h in kept], abs=0.02)
        # A reader that opened the file before it was converted reads the new tables.
        assert reader.spans.exists and reader.spans._fmt == 2
        assert _listing(reader.spans) == _listing(spans)


def test_a_reader_paging_through_the_file_goes_on_where_it_was_after_a_conversion(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process converts the file while a reader (a service loading its copy)
    is between two pages: the rows keep their ids, so it reads the rest in the new
    tables, every chunk once. A chunk row without spans unpacks to none."""
    monkeypatch.setattr(span_basis, "FIT_ROWS", 200)
    db = str(tmp_path / "m.db")
    span_rows, own = rows(1_200, 2)
    bare = {**own[0], "chunk_hash": "f" * 16, "span_id": "f" * 16 + ":0"}
    with MilvusStore(db, collection="notes", dimension=DIM) as store:
        store.spans.create([r["embedding"] for r in span_rows])
        store.spans.put(span_rows, [*own, bare])
        assert [r["span_id"] for p in store.spans.iter_rows() for r in p].count(bare["span_id"]) == 1
    _as_format_1(path_of(db), "notes")
    with (
        MilvusStore(db, collection="notes", dimension=DIM) as reader,
        MilvusStore(db, collection="notes", dimension=DIM) as writer,
    ):
        pages = reader.spans.code_pages()
        first = next(pages)
        assert reader.spans._fmt == 1 and len(first.chunks) < 1_200
        writer.spans.delete_chunks(["no such chunk"])  # a write: converted
        assert writer.spans._fmt == 2
        chunks = [c for page in [first, *pages] for c in page.chunks]
        assert sorted(chunks) == sorted(o["chunk_hash"] for o in own) and reader.spans._fmt == 2


def test_a_moved_chunks_spans_are_found_through_the_chunk_its_vector_came_from(
    notes: Path, tmp_path: Path, model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past a few vanished files a run does not read every vanished file's spans for
    each lookup: a moved chunk finds its spans in the chunk its vector came from."""
    monkeypatch.setattr(index_run, "GONE_NEAR", 0)
    with MemSearch([str(notes)], embedding_model=str(model_dir), milvus_uri=str(tmp_path / "m.db")) as ms:
        index(ms)
        sent = recorded(ms)
        (notes / "2026-11-20.md").rename(notes / "moved.md")
        moved = index(ms)
        assert sent == [] and moved.spans is not None and moved.spans.embedded == 0 and moved.spans.reused > 0
        assert ms.store.spans.chunk_hashes() == spanned(ms)
