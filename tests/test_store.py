"""MilvusStore against real Milvus Lite (a fresh database per test) and a real Lite TCP server.

Most tests open the database in-process (``MEMSEARCH_LITE_MODE=embedded``) to
stay fast; sharing through the per-database server is covered in
test_store_sharing.py. Vectors are deterministic random unit vectors.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import socket
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memsearch_fast.lite import process as lite_process
from memsearch_fast.lite import settings as lite_settings
from memsearch_fast.store import (
    MAX_CONTENT_BYTES,
    DimensionMismatchError,
    MilvusStore,
    StoreError,
    StoreUnavailableError,
    escape_filter_value,
    prefix_filter,
    split_long_rows,
)
from memsearch_fast.store import milvus as store_mod
from memsearch_fast.store import schema as schema_mod
from tests.helpers import reference
from tests.helpers.installed import PACKAGE_PARENT

DIM = 8


def run_python(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Runs *code* in a fresh interpreter (a new process opening the store)."""
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        env=dict(os.environ, PYTHONPATH=PACKAGE_PARENT),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


LITE_MAJOR = int(importlib.metadata.version("milvus-lite").split(".")[0])

HOSTILE = [
    'a"b',
    "a\\b",
    "it's",
    "new\nline",
    "pct%x",
    "under_x",
    "underAx",
    "uni\u00e9\u4e2d\U0001f600",
    'a\\"b',
    "tab\tx",
]


def unit(n: int, seed: int = 0, dim: int = DIM) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def make_row(i: int, vec, content: str = "", source: str = "notes/a.md", **kw) -> dict:
    row = {
        "chunk_hash": f"{i:064x}",
        "embedding": list(map(float, vec)),
        "content": content or f"chunk number {i}",
        "source": source,
        "heading": "Heading",
        "heading_level": 2,
        "start_line": 1,
        "end_line": 3,
    }
    row.update(kw)
    return row


@pytest.fixture
def embedded(monkeypatch):
    monkeypatch.setenv(lite_settings.ENV_MODE, "embedded")


@pytest.fixture
def db(tmp_path, embedded):
    return str(tmp_path / "milvus.db")


@pytest.fixture
def store(db):
    s = MilvusStore(db, dimension=DIM)
    yield s
    s.close()


# -- pure helpers ---------------------------------------------------------------------------


def test_escape_filter_value_escapes_quote_backslash_newline():
    assert escape_filter_value('a"b') == 'a\\"b'
    assert escape_filter_value("a\\b") == "a\\\\b"
    assert escape_filter_value('a\\"b') == 'a\\\\\\"b'
    assert escape_filter_value("x\ny\rz") == "x\\ny\\rz"
    # unicode, tabs, single quotes and LIKE wildcards pass through
    assert escape_filter_value("é中😀\tit's%_") == "é中😀\tit's%_"
    with pytest.raises(TypeError):
        escape_filter_value(3)  # type: ignore[arg-type]


def test_prefix_filter_uses_a_range_not_like():
    expr = prefix_filter("source", 'a%_"')
    assert "like" not in expr
    assert expr.startswith('(source >= "a%_\\""')
    assert prefix_filter("source", "\nx") == ""  # nothing usable before the newline


def test_all_of_joins_only_the_filters_given():
    from memsearch_fast.store.filters import all_of

    assert all_of("", "") == ""
    assert all_of("a == 1", "") == "a == 1"
    assert all_of("", 'b in ["x"]') == 'b in ["x"]'
    assert all_of("a == 1 or c == 2", "b != 3") == "(a == 1 or c == 2) and (b != 3)"  # each keeps its own "or"


def test_split_long_rows_keeps_short_rows_untouched():
    rows = [make_row(1, unit(1)[0], content="short")]
    assert split_long_rows(rows) == rows
    assert split_long_rows(rows)[0] is rows[0]


def test_split_long_rows_splits_on_lines_and_char_boundaries():
    lines = [f"line {i} " + "中" * 30 for i in range(40)]  # ~100 bytes a line
    content = "\n".join(lines) + "\n" + "é" * 700  # last line of 1,400 bytes
    row = make_row(7, unit(1)[0], content=content, start_line=10, end_line=10 + 40)
    parts = split_long_rows([row], max_bytes=500)
    assert len(parts) > 4
    assert all(len(p["content"].encode()) <= 500 for p in parts)
    assert "".join(p["content"] for p in parts) == content  # nothing lost, nothing cut mid-character
    assert len({p["chunk_hash"] for p in parts}) == len(parts)
    assert all(len(p["chunk_hash"]) == 64 for p in parts)
    assert [p["chunk_hash"] for p in split_long_rows([row], max_bytes=500)] == [p["chunk_hash"] for p in parts]
    assert parts[0]["start_line"] == 10
    starts = [p["start_line"] for p in parts]
    assert starts == sorted(starts) and all(10 <= s <= 50 for s in starts)
    assert all(p["end_line"] <= 50 and p["end_line"] >= p["start_line"] for p in parts)
    assert parts[-1]["start_line"] == 50  # the long last line is line 40 after the first
    assert all(p["source"] == row["source"] and p["embedding"] == row["embedding"] for p in parts)


def test_import_is_cheap():
    code = "import sys, memsearch_fast.store, memsearch_fast.lite.server; print('pymilvus' in sys.modules)"
    out = run_python(code)
    assert out.stdout.strip() == "False", out.stderr


# -- collection lifecycle ----------------------------------------------------------------------


def test_read_only_open_of_missing_database_creates_nothing(db):
    s = MilvusStore(db)
    assert not s.exists and s.dimension is None
    assert s.count() == 0 and s.count_sources() == 0
    assert s.search(list(unit(1)[0]), "anything") == []
    assert list(s.iter_ids_by_source(None)) == [] and s.get("x") is None
    assert not os.path.exists(db)
    with pytest.raises(StoreError, match="dimension"):
        s.upsert([make_row(1, unit(1)[0])])
    s.close()


def test_empty_collection_searches_to_nothing(store):
    assert store.exists and store.count() == 0
    assert store.search(list(unit(1)[0]), "hello world") == []
    assert store.search(list(unit(1)[0]), "") == []
    # BM25 alone too (the in-memory dense copy asks for it): Lite 2.5 fails it
    # on a snapshot without documents, which a search racing the first writes
    # of another process also sees, while count() already shows rows.
    assert store.sparse_search("hello world", top_k=5) == []
    assert list(store.iter_ids_by_source(["x.md"])) == []


def test_schema_matches_memsearch_0423(store):
    info = store._client.describe_collection(store.collection)
    fields = {f["name"]: f for f in info["fields"]}
    assert set(fields) == {
        "chunk_hash",
        "embedding",
        "content",
        "sparse_vector",
        "source",
        "heading",
        "heading_level",
        "start_line",
        "end_line",
    }
    assert fields["chunk_hash"].get("is_primary") and int(fields["chunk_hash"]["params"]["max_length"]) == 64
    assert int(fields["embedding"]["params"]["dim"]) == DIM
    assert int(fields["content"]["params"]["max_length"]) == MAX_CONTENT_BYTES
    assert fields["content"]["params"]["enable_analyzer"] in (True, "true")
    funcs = info.get("functions") or []
    if funcs:  # Milvus Lite 2.5 omits functions but flags their output field
        assert [f["name"] for f in funcs] == ["bm25_fn"]
    else:
        assert fields["sparse_vector"].get("is_function_output") is True
    assert info.get("enable_dynamic_field") in (True, None)  # some engines omit it


def test_upsert_count_get_flush_reopen(db):
    vecs = unit(6)
    s = MilvusStore(db, dimension=DIM)
    rows = [make_row(i, vecs[i], source=f"notes/{i % 3}.md") for i in range(6)]
    assert s.upsert(rows) == 6
    assert s.upsert(rows[:2]) == 2  # replacing by primary key does not duplicate
    assert s.count() == 6 and s.count_sources() == 3
    got = s.get(rows[4]["chunk_hash"])
    assert got is not None
    assert {k: got[k] for k in ("content", "source", "heading", "heading_level", "start_line", "end_line")} == {
        "content": "chunk number 4",
        "source": "notes/1.md",
        "heading": "Heading",
        "heading_level": 2,
        "start_line": 1,
        "end_line": 3,
    }
    assert s.get("0" * 63 + "z") is None
    s.flush()
    s.close()
    s2 = MilvusStore(db)  # dimension adopted from the collection
    assert s2.dimension == DIM and s2.count() == 6
    assert s2.search(list(vecs[0]), "chunk")[0]["chunk_hash"] == rows[0]["chunk_hash"]
    s2.close()


@pytest.mark.slow(reason="opens Milvus Lite databases of its own, some in fresh processes")
def test_new_process_searches_without_load_errors(db):
    vecs = unit(3)
    s = MilvusStore(db, dimension=DIM)
    s.upsert([make_row(i, vecs[i], content=f"alpha beta {i}") for i in range(3)])
    s.close()
    code = textwrap.dedent(
        f"""
        import json, sys
        from memsearch_fast.store import MilvusStore
        s = MilvusStore(sys.argv[1])
        hits = s.search({list(map(float, vecs[1]))!r}, "alpha", top_k=2)
        print(json.dumps([s.count(), hits[0]["chunk_hash"]]))
        s.close()
        """
    )
    out = run_python(code, db)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [3, f"{1:064x}"]


def test_dimension_mismatch_raises_one_line_error(db):
    MilvusStore(db, dimension=DIM).close()
    with pytest.raises(DimensionMismatchError) as ei:
        MilvusStore(db, dimension=DIM * 2)
    msg = str(ei.value)
    assert "memsearch reset" in msg and "\n" not in msg and str(DIM) in msg
    assert isinstance(ei.value, StoreError)


def test_wrong_vector_length_in_row_is_rejected(store):
    with pytest.raises(DimensionMismatchError, match="memsearch reset"):
        store.upsert([make_row(1, unit(1, dim=DIM + 1)[0])])


def test_numpy_embeddings_are_accepted(store):
    row = make_row(1, unit(1)[0])
    row["embedding"] = unit(1)[0]
    assert store.upsert([row]) == 1 and store.count() == 1


def test_drop_then_recreate(store):
    store.upsert([make_row(1, unit(1)[0])])
    store.drop()
    assert not store.exists and store.count() == 0 and store.search(list(unit(1)[0]), "x") == []
    store.upsert([make_row(2, unit(1)[0])])  # dimension known: recreated on write
    assert store.count() == 1


def test_collection_dropped_elsewhere_gives_store_error(db, capfd):
    a = MilvusStore(db, dimension=DIM)
    a.upsert([make_row(1, unit(1)[0])])
    b = MilvusStore(db)
    b._client.drop_collection(b.collection)  # another handle resets the index
    with pytest.raises(StoreError) as ei:
        a.get("x")
    assert "does not exist" in str(ei.value) and "\n" not in str(ei.value)
    assert "Traceback" not in capfd.readouterr().err
    a.close()
    b.close()


# -- search ----------------------------------------------------------------------------------


def test_hybrid_scores_are_normalised(store):
    vecs = unit(12, seed=3)
    texts = [f"topic{i} common words here" for i in range(12)]
    store.upsert([make_row(i, vecs[i], content=texts[i], source=f"d/{i}.md") for i in range(12)])
    hits = store.search(list(vecs[5]), "topic5", top_k=5)
    assert hits[0]["chunk_hash"] == f"{5:064x}"
    assert hits[0]["score"] == pytest.approx(1.0, abs=1e-6)  # first in both lists
    assert all(0.0 <= h["score"] <= 1.0 for h in hits)
    assert [h["score"] for h in hits] == sorted((h["score"] for h in hits), reverse=True)
    fields = {"content", "source", "heading", "chunk_hash", "heading_level", "start_line", "end_line", "score"}
    assert set(hits[0]) == fields
    dense_only = store.search(list(vecs[7]), "", top_k=3)
    assert dense_only[0]["chunk_hash"] == f"{7:064x}" and dense_only[0]["score"] == pytest.approx(1.0, abs=1e-6)


def _bm25_only_hit(store, texts: list[str], target: int, query: str) -> bool:
    """Whether ``query`` surfaces ``texts[target]`` when the dense side ranks it last.

    The query vector is the target's embedding negated, so only the BM25 list
    can bring it into a top 3 of 20.
    """
    vecs = unit(len(texts), seed=11)
    store.upsert([make_row(i, vecs[i], content=t, source=f"k/{i}.md") for i, t in enumerate(texts)])
    hits = store.search(list(-vecs[target]), query, top_k=3)
    return f"{target:064x}" in [h["chunk_hash"] for h in hits]


FRUIT = ["kiwi", "mango", "lemon", "peach", "plum"]
FILLER = [f"unrelated filler paragraph number {i} about gardening" for i in range(17)]


def test_bm25_finds_chinese_keyword(store):
    if store.analyzer != schema_mod.CJK_ANALYZER:
        pytest.fail(
            f"CJK analyzer unavailable on this engine (got {store.analyzer}); install jieba for Milvus Lite 3.x"
        )
    texts = [*FILLER, "我喜欢机器学习和深度学习", "数据库索引的设计原则", "Quick Brown Fox jumps"]
    assert _bm25_only_hit(store, texts, 17, "机器学习")
    assert not _bm25_only_hit(store, texts, 17, "园艺")  # control: a word it does not contain


def test_bm25_english_is_case_insensitive(store):
    texts = [*FILLER, "我喜欢机器学习和深度学习", "数据库索引的设计原则", "Quick Brown Fox jumps"]
    assert _bm25_only_hit(store, texts, 19, "quick FOX")


def test_source_prefix_filter_is_literal(store):
    sources = ["pre%/a.md", "preX/a.md", "pre_/b.md", "preY/b.md"]
    sources += ['q"/c.md', "q\\/c.md", "it's/d.md", "nl\n/e.md", "nl/f.md"]
    vecs = unit(len(sources), seed=5)
    store.upsert([make_row(i, vecs[i], content="same words", source=s) for i, s in enumerate(sources)])
    q = list(unit(1, seed=99)[0])

    def found(prefix):
        return sorted(h["source"] for h in store.search(q, "same", top_k=20, source_prefix=prefix))

    assert found("pre%") == ["pre%/a.md"]
    assert found("pre_") == ["pre_/b.md"]
    assert found("pre") == sorted(["pre%/a.md", "pre_/b.md", "preX/a.md", "preY/b.md"])
    assert found('q"') == ['q"/c.md']
    assert found("q\\") == ["q\\/c.md"]
    assert found("it's") == ["it's/d.md"]
    assert found("nl\n") == ["nl\n/e.md"]
    assert found("zzz") == []


# -- hostile names through every filter path -----------------------------------------------


def _load_hostile(store) -> dict[str, str]:
    vecs = unit(len(HOSTILE), seed=8)
    ids = {}
    rows = []
    for i, src in enumerate(HOSTILE):
        rows.append(make_row(i, vecs[i], content=f"content {i}", source=src))
        ids[src] = rows[-1]["chunk_hash"]
    store.upsert(rows)
    return ids


def test_iter_and_rows_for_hostile_sources(store):
    ids = _load_hostile(store)
    for src in HOSTILE:
        assert list(store.iter_ids_by_source([src])) == [(ids[src], src)], repr(src)
        rows = store.rows_for_sources([src], ["chunk_hash", "content", "embedding"])
        assert [r["chunk_hash"] for r in rows] == [ids[src]], repr(src)
        assert len(rows[0]["embedding"]) == DIM and rows[0]["content"].startswith("content")
    assert sorted(store.iter_ids_by_source(HOSTILE)) == sorted((ids[s], s) for s in HOSTILE)
    assert sorted(store.iter_ids_by_source(None)) == sorted((ids[s], s) for s in HOSTILE)


def test_delete_hostile_sources_deletes_exactly_those(store):
    ids = _load_hostile(store)
    assert store.delete_sources(['a"b', "new\nline", "pct%x"]) == 3
    left = {s for _, s in store.iter_ids_by_source(None)}
    assert left == set(HOSTILE) - {'a"b', "new\nline", "pct%x"}
    assert store.delete_sources(["under%", "a\\"]) == 0  # no wildcard or partial match
    assert store.delete_ids([ids["it's"], ids["a\\b"], "no-such-id"]) == 3
    assert store.count() == len(HOSTILE) - 5


def test_large_sets_are_paged(store, monkeypatch):
    from memsearch_fast.store import client

    monkeypatch.setattr(store_mod, "FILTER_BATCH", 3)
    monkeypatch.setattr(client, "ITER_BATCH", 4)
    monkeypatch.setattr(client, "ITER_BATCH_VECTORS", 3)  # pages of rows with vectors: smaller
    vecs = unit(40, seed=2)
    store.upsert([make_row(i, vecs[i], source=f"f/{i % 10}.md") for i in range(40)])
    assert sum(1 for _ in store.iter_ids_by_source(None)) == 40
    assert [len(p) for p in store._iterate("", ["chunk_hash"])] == [4] * 10
    assert [len(p) for p in store._iterate("", ["chunk_hash", "embedding"])] == [3] * 13 + [1]
    wanted = [f"f/{i}.md" for i in range(7)]
    assert sum(1 for _ in store.iter_ids_by_source(wanted)) == 28
    assert len(store.rows_for_sources(wanted, ["chunk_hash"])) == 28
    with_vectors = store.rows_for_sources(wanted, ["chunk_hash", "embedding"])
    assert sorted(r["chunk_hash"] for r in with_vectors) == sorted(f"{i:064x}" for i in range(40) if i % 10 < 7)
    assert store.count_sources() == 10
    assert store.delete_ids([f"{i:064x}" for i in range(0, 40, 2)]) == 20
    assert store.count() == 20


def test_upsert_batches_by_count(store, monkeypatch):
    monkeypatch.setattr(store_mod, "UPSERT_BATCH", 7)
    vecs = unit(30)
    assert store.upsert([make_row(i, vecs[i]) for i in range(30)]) == 30
    assert store.count() == 30


def test_rows_written_as_columns_are_the_rows_the_row_api_writes(tmp_path, embedded, monkeypatch):
    """The column request (store/columns.py) stores what pymilvus's row API stores,
    BM25 vector included, through insert and upsert; rows of other keys go as rows."""
    from memsearch_fast.store import columns

    used: list[str] = []
    real = columns.write_columns

    def spy(client, op, collection, rows):
        done = real(client, op, collection, rows)
        used.append(op if done is not None else "rows")
        return done

    vecs = unit(12)
    rows = [make_row(i, vecs[i], content=f"alpha {i} beta{i % 3}", source=f"notes/{i % 4}.md") for i in range(12)]
    got = []
    for name, writer in (("columns", spy), ("rows", lambda *a: None)):
        monkeypatch.setattr(store_mod, "write_columns", writer)
        s = MilvusStore(str(tmp_path / f"{name}.db"), dimension=DIM)
        assert s.insert(rows[:8]) == 8
        assert s.upsert([{**r, "content": r["content"] + " gamma"} for r in rows[4:]]) == 8
        s.flush()
        fields = ["chunk_hash", "content", "embedding", "heading", "heading_level", "start_line", "end_line"]
        stored = {
            r["chunk_hash"]: {**r, "embedding": [round(float(x), 6) for x in r["embedding"]]}
            for r in s.rows_for_sources([f"notes/{i}.md" for i in range(4)], fields)
        }
        hits = [(h["chunk_hash"], round(h["score"], 5)) for h in s.search(list(vecs[5]), "gamma beta2", top_k=6)]
        got.append((stored, hits))
        s.close()
    assert used == ["insert", "upsert"]
    (cols, col_hits), (plain, row_hits) = got
    assert cols.keys() == plain.keys() and len(cols) == 12
    for h, r in plain.items():
        assert cols[h] == r
    assert col_hits == row_hits and col_hits

    class Handler:
        def batch_insert(self, *a, **k):  # pragma: no cover - must not be reached
            raise AssertionError("rows of other keys went as columns")

    class Client:
        def _get_connection(self):
            return Handler()

        def describe_collection(self, name):
            return {
                "fields": [{"name": "chunk_hash", "type": 21}, {"name": "x", "type": 5, "is_function_output": True}]
            }

    assert real(Client(), "insert", "c", [{"chunk_hash": "a", "extra": 1}]) is None
    assert real(object(), "insert", "c", [{"chunk_hash": "a"}]) is None


# -- field limits ----------------------------------------------------------------------------


def test_overlong_content_is_split_not_rejected(store):
    content = "\n".join(f"paragraph {i} " + "机器学习" * 400 for i in range(30))  # ~145 KB
    row = make_row(1, unit(1)[0], content=content, source="big.md", start_line=1, end_line=30)
    written = store.upsert([row])
    assert written >= 3
    assert store.count() == written
    rows = store.rows_for_sources(["big.md"], ["chunk_hash", "content", "start_line"])
    assert all(len(r["content"].encode()) <= MAX_CONTENT_BYTES for r in rows)
    assert "".join(r["content"] for r in sorted(rows, key=lambda r: r["start_line"])) == content
    store.upsert([row])  # same ids again: no duplicates
    assert store.count() == written


def test_long_heading_truncated_long_source_rejected(store):
    row = make_row(1, unit(1)[0], heading="标" * 600)  # 1,800 bytes
    store.upsert([row])
    assert len(store.get(row["chunk_hash"])["heading"].encode()) <= 1024
    with pytest.raises(StoreError, match="source path longer"):
        store.upsert([make_row(2, unit(1)[0], source="x" * 1100)])


# -- memsearch 0.4.23 interoperability ------------------------------------------------------


REF_WRITE = """
from memsearch.store import MilvusStore
ref = MilvusStore(db, dimension=dim, _create_if_missing=True)
ref.upsert(rows)
ref.close()
"""

REF_READ = """
from memsearch.store import MilvusStore
ref = MilvusStore(db, dimension=dim)
hits = ref.search(query, query_text="mango", top_k=2)
result = {
    "hits": [[h["chunk_hash"], h["score"]] for h in hits],
    "sources": sorted(ref.indexed_sources()),
    "hashes": sorted(ref.hashes_by_source("o/2.md")),
}
ref.close()
"""


@pytest.mark.slow(reason="opens Milvus Lite databases of its own, some in fresh processes")
def test_reference_collection_is_readable_by_us(db):
    vecs = unit(4, seed=21)
    rows = [make_row(i, vecs[i], content=f"reference row {FRUIT[i]}", source=f"r/{i}.md") for i in range(4)]
    reference.run_apart(REF_WRITE, db=db, dim=DIM, rows=rows)
    s = MilvusStore(db)
    assert s.dimension == DIM and s.count() == 4 and s.count_sources() == 4
    hits = s.search(list(vecs[2]), "lemon", top_k=2)
    assert hits[0]["chunk_hash"] == f"{2:064x}" and hits[0]["score"] == pytest.approx(1.0, abs=1e-6)
    assert list(s.iter_ids_by_source(["r/3.md"])) == [(f"{3:064x}", "r/3.md")]
    s.upsert([make_row(9, vecs[0], content="ours in theirs", source="o.md")])
    assert s.count() == 5
    with pytest.raises(DimensionMismatchError):
        MilvusStore(db, dimension=DIM + 1)
    s.close()


@pytest.mark.slow(reason="opens Milvus Lite databases of its own, some in fresh processes")
def test_our_collection_is_readable_by_reference(db):
    vecs = unit(4, seed=22)
    s = MilvusStore(db, dimension=DIM)
    s.upsert([make_row(i, vecs[i], content=f"our row {FRUIT[i]}", source=f"o/{i}.md") for i in range(4)])
    s.close()
    got = reference.run_apart(REF_READ, db=db, dim=DIM, query=list(map(float, vecs[1])))
    assert got["hits"][0][0] == f"{1:064x}" and got["hits"][0][1] == pytest.approx(1.0, abs=1e-6)
    assert got["sources"] == [f"o/{i}.md" for i in range(4)]
    assert got["hashes"] == [f"{2:064x}"]


# -- Milvus server URI (a real milvus-lite gRPC server) ---------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def milvus_server(tmp_path_factory):
    """A Milvus-protocol server on 127.0.0.1 (``milvus-lite server`` on 3.x)."""
    data = tmp_path_factory.mktemp("server") / "server.db"
    env = dict(os.environ, PYTHONPATH=PACKAGE_PARENT)
    if LITE_MAJOR >= 3:
        port = _free_port()
        cmd = [sys.executable, "-m", "milvus_lite", "server", "--data-dir", str(data), "--host", "127.0.0.1"]
        cmd += ["--port", str(port)]
    else:  # milvus-lite 2.x has no server command: serve through our wrapper, on TCP
        port = _free_port()
        cmd = [sys.executable, "-m", "memsearch_fast.serve.lite_main", "serve", str(data), "--idle-timeout", "3600"]
        cmd += ["--port", str(port)]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if lite_process.endpoint_open(f"127.0.0.1:{port}", 0.2):
                break
            assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
            time.sleep(0.1)
        else:
            pytest.fail("Milvus server did not start")
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()


def test_server_uri_roundtrip(milvus_server):
    vecs = unit(5, seed=31)
    s = MilvusStore(milvus_server, collection="roundtrip", dimension=DIM)
    try:
        s.upsert([make_row(i, vecs[i], content=f"server row {FRUIT[i]}", source=f"s/{i}.md") for i in range(5)])
        assert s.count() == 5 and s.count_sources() == 5
        hits = s.search(list(vecs[3]), "peach", top_k=3, source_prefix="s/")
        assert hits[0]["chunk_hash"] == f"{3:064x}"
        assert s.delete_sources(["s/0.md", "s/1.md"]) == 2 and s.count() == 3
        with pytest.raises(DimensionMismatchError, match="memsearch reset"):
            MilvusStore(milvus_server, collection="roundtrip", dimension=DIM + 2)
        other = MilvusStore(milvus_server, collection="roundtrip")
        assert other.dimension == DIM and other.count() == 3
        other.close()
    finally:
        s.drop()
        s.close()


def test_span_vectors_on_a_server_uri(milvus_server, model_dir, tmp_path, monkeypatch):
    """Spans live in a companion collection on a Milvus server too (not only in Lite
    or the in-memory copy): written, searched, and dropped with the collection."""
    import asyncio

    from memsearch_fast import MemSearch

    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # a server's manifest goes under ~/.memsearch

    notes = tmp_path / "notes"
    notes.mkdir()
    filler = [f"Reviewed pull request {i} of the aspen worker pool; the build stayed green." for i in range(10)]
    fact = "The aspen nightly export now writes its archive to the cold bucket named glacier-otter-7."
    (notes / "day.md").write_text("### 10:00\n" + "".join(f"- {b}\n" for b in [*filler, fact]), encoding="utf-8")
    args = {"embedding_model": str(model_dir), "milvus_uri": milvus_server, "collection": "spans_srv"}
    with MemSearch([str(notes)], **args) as ms:
        report = asyncio.run(ms.index_with_report())
        assert report.spans is not None and report.spans.embedded >= len(filler)
        assert ms.store.spans.chunk_hashes() == {cid for cid, _ in ms.store.iter_ids_by_source(None)}
        vector = asyncio.run(ms.provider.embed_query("which bucket does the aspen export archive go to"))
        best = ms.store.search(vector, "", top_k=1, explain=True)[0]
        assert best["explain"]["span"]["start_line"] == best["explain"]["span"]["end_line"] == 12
        assert ms.drop() is True and not ms.store.spans.exists


def test_server_uri_missing_collection_reads_empty(milvus_server):
    s = MilvusStore(milvus_server, collection="never_created")
    assert not s.exists and s.count() == 0 and s.search(list(unit(1)[0]), "x") == []
    s.close()


def test_unreachable_server_is_one_line_unavailable_error(capfd):
    with pytest.raises(StoreUnavailableError) as ei:
        MilvusStore(f"http://127.0.0.1:{_free_port()}", dimension=DIM)
    assert "unreachable" in str(ei.value) and "\n" not in str(ei.value)
    assert "Traceback" not in capfd.readouterr().err


@pytest.mark.skipif(LITE_MAJOR < 3, reason="Milvus Lite 2.x has jieba built in")
def test_without_jieba_falls_back_to_standard_analyzer(db):
    code = textwrap.dedent(
        """
        import sys
        sys.modules["jieba"] = None  # as if the package were not installed
        from memsearch_fast.store import MilvusStore
        s = MilvusStore(sys.argv[1], dimension=8)
        s.upsert([dict(chunk_hash="a", embedding=[0.1] * 8, content="Quick Brown Fox", source="x.md")])
        print(s.analyzer["tokenizer"], len(s.search([0.1] * 8, "quick")))
        s.close()
        """
    )
    out = run_python(code, db)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["standard", "1"]
    assert "jieba" in out.stderr and "Traceback" not in out.stderr


def _sparse_only(store, query: str) -> list[int]:
    res = store._client.search(
        store.collection,
        data=[query],
        anns_field="sparse_vector",
        search_params={"metric_type": "BM25"},
        limit=10,
        output_fields=["chunk_hash"],
    )
    return sorted(int(h["entity"]["chunk_hash"], 16) for h in res[0])


def test_bm25_ignores_spaces_and_punctuation(store):
    """Words found nowhere find nothing on the sparse side (jieba alone made every chunk match
    through its spaces and punctuation); CJK splitting stays."""
    assert store.analyzer == schema_mod.CJK_ANALYZER
    texts = ["The sierra gateway listens on port 20000.", "数据库迁移完成，索引重建。", "   ...   ", "hello, world!"]
    vecs = unit(len(texts), seed=3)
    store.upsert([make_row(i, vecs[i], content=t, source=f"k/{i}.md") for i, t in enumerate(texts)])
    assert _sparse_only(store, "zzzqqq xyzzy") == []
    assert _sparse_only(store, "gateway port!!") == [0]
    assert _sparse_only(store, "数据库迁移") == [1]


@pytest.mark.slow(reason="opens Milvus Lite databases of its own, some in fresh processes")
def test_a_collection_with_the_older_analyzer_keeps_working(db):
    s = MilvusStore(db, dimension=DIM)
    s.drop()
    s._create_with(schema_mod.CJK_ANALYZER_PLAIN)
    s.close()
    s = MilvusStore(db, dimension=DIM)
    try:
        assert s.analyzer == schema_mod.CJK_ANALYZER_PLAIN
        vecs = unit(2, seed=4)
        s.upsert([make_row(i, vecs[i], content=t) for i, t in enumerate(["alpha beta", "gamma delta"])])
        assert s.search(list(vecs[1]), "gamma", top_k=1)[0]["content"] == "gamma delta"
    finally:
        s.close()


def test_fusion_scales_each_list_and_weighs_them():
    from memsearch_fast.store import fusion

    w = fusion.DENSE_WEIGHT
    dense = [("a", 0.8), ("b", 0.4), ("c", -0.1)]
    sparse = [("c", 12.0), ("d", 6.0), ("a", 3.0)]
    got = {f.id: f for f in fusion.fuse(dense, sparse, 10)}
    assert got["a"].score == pytest.approx(w * 1.0 + (1 - w) * 0.25)
    assert got["b"].score == pytest.approx(w * 0.5)
    assert got["c"].score == pytest.approx(w * 0.0 + (1 - w) * 1.0)  # a negative cosine counts 0
    assert got["d"].score == pytest.approx((1 - w) * 0.5)
    assert (got["c"].dense_rank, got["c"].sparse_rank, got["c"].sparse_score) == (3, 1, 12.0)
    assert [f.id for f in fusion.fuse(dense, sparse, 2)] == sorted(got, key=lambda k: -got[k].score)[:2]
    # A chunk far ahead in one list beats one midway in both (where RRF ranks them the other way).
    far = fusion.fuse([("x", 0.8), ("y", 0.3), ("z", 0.29)], [("q", 9.0), ("y", 2.0), ("z", 1.9)], 3)
    assert far[0].id == "x"
    # One list alone (no query text, or no word found) carries the whole weight.
    alone = fusion.fuse(dense, [], 3)
    assert [f.score for f in alone] == pytest.approx([1.0, 0.5, 0.0])
    assert fusion.fuse([("only", -0.3)], [], 1)[0].score == 1.0


def test_the_questions_words_in_the_matched_line_count_in_the_fused_score():
    """BM25 over whole chunks prefers the entry that names the project and the
    component on several lines; the fact's line holds more of the question's
    words, and that share counts beside the two lists."""
    from memsearch_fast.store import fusion

    w = fusion.WORDS_WEIGHT
    dense, sparse = [("entry", 0.80), ("fact", 0.78)], [("entry", 12.0), ("fact", 11.0)]
    assert [f.id for f in fusion.fuse(dense, sparse, 2)] == ["entry", "fact"]
    got = fusion.fuse(dense, sparse, 2, words={"entry": 0.5, "fact": 4 / 6})
    assert [f.id for f in got] == ["fact", "entry"]
    lists = fusion.DENSE_WEIGHT * 0.78 / 0.80 + (1 - fusion.DENSE_WEIGHT) * 11.0 / 12.0
    assert got[0].score == pytest.approx((lists + w * 4 / 6) / (1 + w))
    # First in both lists, its line holding every word: 1.0. No word asked: the lists alone.
    assert fusion.fuse(dense, sparse, 1, words={"entry": 1.0})[0].score == pytest.approx(1.0)
    alone = fusion.fuse(dense, sparse, 2)
    for none in ({}, {"entry": 0.0, "fact": 0.0}):  # no line holds a word asked: no chunk moves, no score falls
        assert [(f.id, f.score) for f in fusion.fuse(dense, sparse, 2, words=none)] == [(f.id, f.score) for f in alone]
    # One list alone shares its weight with the words as both lists do.
    assert fusion.fuse(dense, [], 1, words={"entry": 0.5})[0].score == pytest.approx((1.0 + w * 0.5) / (1 + w))


@settings(max_examples=300, deadline=None)
@given(
    dense_scores=st.lists(st.floats(-0.2, 1.0), min_size=1, max_size=14),
    sparse_scores=st.lists(st.floats(0.1, 20.0), min_size=1, max_size=10),
    shared=st.integers(0, 10),
    fill=st.lists(st.floats(0.0, 1.0), min_size=14, max_size=14),
    words=st.lists(st.sampled_from([0.0, 0.25, 0.5, 1.0]), min_size=24, max_size=24),
    top_k=st.integers(1, 12),
    trust=st.floats(0.0, 1.0),
)
def test_the_bm25_fill_is_skipped_only_where_it_cannot_change_the_answer(
    dense_scores, sparse_scores, shared, fill, words, top_k, trust
):
    """``fill_matters`` says False only when the dense hits missing from the BM25
    list, at any BM25 score up to the list's last, leave the first top_k as they
    are: results, order, scores and ranks."""
    from memsearch_fast.store import fusion

    dense = sorted(((f"d{i}", s) for i, s in enumerate(dense_scores)), key=lambda kv: -kv[1])
    shared = min(shared, len(dense), len(sparse_scores))
    ids = [cid for cid, _ in dense[:shared]] + [f"s{i}" for i in range(len(sparse_scores) - shared)]
    sparse = sorted(zip(ids, sparse_scores, strict=True), key=lambda kv: -kv[1])
    share = {cid: w for (cid, _), w in zip([*dense, *sparse], words, strict=False)}
    deep = len(sparse)  # a full list: the missing hits may have a score
    have = {cid for cid, _ in sparse}
    floor = sparse[-1][1]
    filled = sorted(
        [*sparse, *((cid, floor * f) for (cid, _), f in zip(dense, fill, strict=False) if cid not in have)],
        key=lambda kv: -kv[1],
    )

    def answer(lst):
        return [
            (f.id, f.score, f.dense_rank, f.sparse_rank, f.sparse_score, f.kept_at)
            for f in fusion.fuse(dense, lst, top_k, bm25_trust=trust, words=share)
        ]

    if not fusion.fill_matters(dense, sparse, top_k, deep=deep, bm25_trust=trust, words=share):
        assert answer(sparse) == answer(filled)
    # A short list holds every chunk with a BM25 score: nothing to fill.
    assert not fusion.fill_matters(dense, sparse, top_k, deep=deep + 1, bm25_trust=trust, words=share)


def test_the_bm25_fill_is_asked_where_it_can_change_the_answer():
    from memsearch_fast.store import fusion

    dense = [("a", 0.9), ("b", 0.88), ("c", 0.2)]
    sparse = [("c", 10.0), ("x", 9.0), ("b", 8.0)]  # "a", dense first, is missing from it
    assert fusion.fill_matters(dense, sparse, 2, deep=3)  # its kept place depends on its own score
    dense = [("c", 0.9), ("x", 0.89), ("b", 0.88)]
    sparse = [("c", 10.0), ("x", 9.9), ("y", 9.8)]  # "b" would reach the top 3 with any BM25 score
    assert fusion.fill_matters(dense, sparse, 3, deep=3)
    filled = [*sparse, ("b", 9.7)]
    assert [f.id for f in fusion.fuse(dense, filled, 3)] != [f.id for f in fusion.fuse(dense, sparse, 3)]
    # Far below the first top_k even at the list's last score: not asked.
    both = [f"w{i}" for i in range(6)]
    dense = [*((c, 0.9 - i / 100) for i, c in enumerate(both)), *((f"z{i}", 0.1) for i in range(3))]
    sparse = [(c, 10.0 - i / 10) for i, c in enumerate(both)]
    assert not fusion.fill_matters(dense, sparse, 2, deep=6)
    assert fusion.fill_matters(dense, sparse, 7, deep=6)  # the seventh place is theirs to take
    # With the fill, a chunk missing from the BM25 list (its words lift it) passes the dense
    # first chunk, which is kept at second with the score of the chunk it moved above.
    dense = [("d3", 0.98), ("d4", 0.89), ("d1", 0.72), ("d2", 0.71), ("d5", 0.67), ("d0", 0.6)]
    sparse = [("d1", 5.9), ("d4", 4.8), ("d5", 4.8), ("d2", 4.2), ("d3", 1.1)]
    words = {"d0": 1.0}
    filled = [*sparse, ("d0", 1.1)]
    without, with_fill = fusion.fuse(dense, sparse, 5, words=words), fusion.fuse(dense, filled, 5, words=words)
    assert with_fill[0].id == "d0" and with_fill[1].id == "d3" and with_fill[1].kept_at == 2
    # Without it, BM25's first (d1) led with a dense score far below d3's: d3 went first.
    assert [f.id for f in without[:2]] == ["d3", "d1"] and without[0].kept_at == 1
    assert fusion.fill_matters(dense, sparse, 5, deep=5, words=words)


def test_the_dense_lists_first_chunk_is_fused_within_the_first_two():
    """A chunk the dense side ranks first, but whose BM25 score is low, is not
    pushed below second by chunks BM25 prefers; it takes second place at second
    place's score, and the order is the same whatever top_k."""
    from memsearch_fast.store import fusion

    assert fusion.DENSE_FIRST_WITHIN == 2
    others = [f"c{i}" for i in range(8)]
    dense = [("first", 0.90), *[(c, 0.85 - i / 100) for i, c in enumerate(others)]]
    sparse = [*[(c, 10.0 - i / 10) for i, c in enumerate(others)], ("first", 1.0)]
    by_score = sorted(others, key=lambda c: -dict((f.id, f.score) for f in fusion.fuse(dense, sparse, 10))[c])
    got = fusion.fuse(dense, sparse, 10)
    assert [f.id for f in got] == [*by_score[:1], "first", *by_score[1:]]
    assert got[1].score == got[2].score and got[1].dense_rank == 1  # monotonic scores, its own ranks
    assert got[1].kept_at == 2 and fusion.hit(got[1], {}, [], True)["explain"]["kept_at"] == 2
    assert all(f.kept_at is None for f in got if f.id != "first")
    assert "kept_at" not in fusion.hit(got[0], {}, [], True)["explain"]
    from memsearch_fast.recall.search import explain_line

    assert explain_line(fusion.hit(got[1], {}, [], True)["explain"]).endswith("(dense #1 kept at #2)")
    assert [f.id for f in fusion.fuse(dense, sparse, 5)] == [f.id for f in got[:5]]
    assert [f.id for f in fusion.fuse(dense, sparse, 3)] == [f.id for f in got[:3]]
    # Already within the first two: left where its score puts it.
    near = [("first", 0.90), *[(c, 0.89 - i / 100) for i, c in enumerate(others)]]
    kept = fusion.fuse(near, sparse[:1], 10)
    assert [f.id for f in kept].index("first") == 1 and kept[1].kept_at is None
    assert [f.score for f in kept] == sorted((f.score for f in kept), reverse=True)


def test_bm25_is_trusted_by_how_far_its_best_stands_out():
    """A list that falls off fast (a key, a name) keeps BM25's share; a flat one
    (words that are everywhere) gives it up, and the dense side ranks."""
    from memsearch_fast.store import fusion

    assert fusion.trust([9.0, 2.0, 1.5, 1.0], 30) == 1.0
    assert fusion.trust([5.0], 30) == 1.0  # padded with zeros: one hit stands out
    flat = [10.0 - i * 0.05 for i in range(30)]
    assert fusion.trust(flat, 30) == pytest.approx(2 * (10.0 - flat[15]) / 10.0)
    assert fusion.trust(flat, 30) < 0.2
    assert fusion.trust([], 30) == 1.0
    dense = [("a", 0.9), ("b", 0.7)]
    sparse = [("b", 10.0), ("c", 9.9)]
    assert fusion.fuse(dense, sparse, 3)[0].id == "b"  # trusted: b's BM25 lead lifts it
    low = fusion.fuse(dense, sparse, 3, bm25_trust=0.1)
    assert low[0].id == "a"
    # First in both lists is 1.0 whatever the trust.
    assert fusion.fuse([("a", 0.9)], [("a", 3.0)], 1, bm25_trust=0.3)[0].score == pytest.approx(1.0)


def test_the_dense_lists_first_chunk_goes_first_over_bm25s_lone_pick(monkeypatch):
    """When the fused first is a chunk the dense list scores below
    DENSE_FIRST_OVER of its best, the dense list's first takes the first place
    (at its score); only the chunks above it move, one place each."""
    from memsearch_fast.store import fusion

    assert fusion.DENSE_FIRST_OVER == 0.75
    # The meetings' case: BM25's first names the component over and over, the
    # model puts it well below the turn that answers.
    dense = [("turn", 0.62), ("x", 0.58), ("peaked", 0.40), ("y", 0.39)]
    sparse = [("peaked", 12.0), ("y", 5.0), ("x", 4.5), ("turn", 1.0)]
    got = fusion.fuse(dense, sparse, 4)
    assert [f.id for f in got] == ["turn", "peaked", "x", "y"]
    assert got[0].kept_at == 1 and got[0].score == got[1].score and got[0].dense_rank == 1
    with monkeypatch.context() as m:
        m.setattr(fusion, "DENSE_FIRST_OVER", 0.0)  # only kept within the first two
        assert [f.id for f in fusion.fuse(dense, sparse, 4)] == ["peaked", "turn", "x", "y"]
    # A line of it holds every word asked (a key, a name): it stays first.
    assert fusion.fuse(dense, sparse, 4, words={"peaked": 1.0, "turn": 0.5})[0].id == "peaked"
    # The fused first is one the dense list also rates (0.50 >= 0.75 x 0.62): it stays first.
    near = [("turn", 0.62), ("x", 0.58), ("peaked", 0.50), ("y", 0.39)]
    assert [f.id for f in fusion.fuse(near, sparse, 4)][:2] == ["peaked", "turn"]
    # A negative cosine counts as 0: far, however BM25 and the words lift it.
    negative = [("turn", 0.62), ("x", 0.58), ("neg", -0.2)]
    lifted = fusion.fuse(negative, [("neg", 12.0), ("x", 1.0)], 3, words={"neg": 0.5})
    assert [f.id for f in lifted] == ["turn", "neg", "x"] and lifted[0].kept_at == 1
    # The fused first is the dense list's own first: nothing moves.
    assert fusion.fuse(dense, [("turn", 3.0), ("peaked", 2.9)], 2)[0].kept_at is None


def test_search_puts_the_dense_first_over_a_chunk_only_bm25_ranks_high(store, monkeypatch):
    """Through the store: a short chunk that repeats two of the question's words
    is BM25's first, the chunk the question's vector points at holds them once in
    a long line. The store's answer starts with the latter, the former second."""
    from memsearch_fast.store import fusion

    question = "what did we do once the gateway outage began"
    e = np.eye(DIM, dtype=np.float32)
    answer, repeats = e[0], 0.6 * e[0] + 0.8 * e[1]  # 0.6 + bonus: 0.65 of the answer's, below 0.75
    rest = unit(12, seed=41)
    rest[:, :2] = 0.0
    rest /= np.linalg.norm(rest, axis=1, keepdims=True)
    texts = [
        "gateway outage gateway outage gateway outage",
        "gateway outage response: rolled back deploy, paged owner, wrote down every step "
        "taken until error rate fell under one percent again",
        *[f"unrelated filler paragraph number {i} about gardening" for i in range(12)],
    ]
    vectors = [repeats, answer, *rest]
    rows = [make_row(i, v, content=t, source=f"g/{i}.md") for i, (v, t) in enumerate(zip(vectors, texts, strict=True))]
    store.upsert(rows)
    hits = store.search(list(answer), question, top_k=3, explain=True)
    assert [h["chunk_hash"] for h in hits[:2]] == [f"{1:064x}", f"{0:064x}"]
    assert hits[0]["explain"]["kept_at"] == 1 and hits[0]["explain"]["dense_rank"] == 1
    assert hits[1]["explain"]["sparse_rank"] == 1 and hits[1]["explain"]["words"] < 1.0
    monkeypatch.setattr(fusion, "DENSE_FIRST_OVER", 0.0)
    hits = store.search(list(answer), question, top_k=3, explain=True)
    assert [h["chunk_hash"] for h in hits[:2]] == [f"{0:064x}", f"{1:064x}"]


def test_a_dense_hit_beyond_the_bm25_list_keeps_its_bm25_score(store, monkeypatch):
    """Each list one deep: the dense hit is not BM25's first, but it holds the
    query's word and is fused with that score (a BM25 search among the dense hits)."""
    from memsearch_fast.store import fusion

    monkeypatch.setattr(fusion, "DEPTH", 1)
    texts = ["otter otter otter report", "the otter report for the week", "nothing to see"]
    vecs = unit(3, seed=31)
    store.upsert([make_row(i, vecs[i], content=t, source=f"o/{i}.md") for i, t in enumerate(texts)])
    hits = store.search(list(vecs[1]), "otter", top_k=1, explain=True)
    assert hits[0]["content"] == texts[1]
    ex = hits[0]["explain"]
    assert ex["dense_rank"] == 1 and ex["sparse_score"] is not None and ex["sparse_score"] > 0
    sparse_alone = store.sparse_search("otter", top_k=2)
    assert ex["sparse_score"] == pytest.approx(next(h["distance"] for h in sparse_alone if h["content"] == texts[1]))


def test_explain_gives_each_retrievers_rank_and_the_fused_score(store):
    texts = [*FILLER, "the quick brown fox", "a quick note about foxes and hounds"]
    vecs = unit(len(texts), seed=21)
    store.upsert([make_row(i, vecs[i], content=t, source=f"e/{i}.md") for i, t in enumerate(texts)])
    hits = store.search(list(vecs[18]), "quick fox", top_k=5, explain=True)
    plain = store.search(list(vecs[18]), "quick fox", top_k=5)
    assert [h["chunk_hash"] for h in hits] == [h["chunk_hash"] for h in plain]
    near = next(h["explain"] for h in hits if h["chunk_hash"] == f"{18:064x}")  # the vector searched for
    assert near["dense_rank"] == 1 and near["sparse_rank"] is not None and near["words"] == 0.5  # quick, not fox
    # "the quick brown fox": first in BM25, every word asked in its line, a random vector.
    assert hits[0]["content"] == "the quick brown fox" and hits[0]["explain"]["words"] == 1.0
    for h in hits:
        e = h["explain"]
        assert e["fused"] == pytest.approx(h["score"], abs=1e-6)
        assert e["dense_rank"] is not None or e["sparse_rank"] is not None
    assert any(h["explain"]["sparse_rank"] is None for h in hits)  # a dense-only hit: no query word in it
