"""Milvus Lite 2.x finds rows by primary key through an index of ours
(:mod:`memsearch_fast.lite.pk_index`): a new collection is made with it, a
database from before gets it at the engine's next start, and nothing else
in the file is touched."""

from __future__ import annotations

import importlib.metadata
import os
import sqlite3
from pathlib import Path

import pytest

from memsearch_fast.lite import broker as lite_broker
from memsearch_fast.lite import pk_index
from memsearch_fast.lite import settings as lite_settings
from memsearch_fast.store import MilvusStore
from tests.test_store_sharing import DIM, rows

pytestmark = [
    pytest.mark.skipif(os.name != "posix", reason="the shared server needs fcntl and fork"),
    pytest.mark.skipif(
        int(importlib.metadata.version("milvus-lite").split(".")[0]) != 2, reason="Milvus Lite 2.x keeps rows in SQLite"
    ),
]


@pytest.fixture
def db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv(lite_settings.ENV_MODE, raising=False)
    path = str(tmp_path / "milvus.db")
    yield path
    lite_broker.stop_server(path)


def _objects(path: str) -> set[tuple[str, str]]:
    """The file's tables and indexes (read while no engine has it open)."""
    c = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return set(c.execute("SELECT type, name FROM sqlite_master"))
    finally:
        c.close()


def _plan(path: str, table: str) -> str:
    c = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        sql = f'DELETE FROM "{table}" WHERE milvus_id IN (?, ?)'
        return " ".join(str(r[-1]) for r in c.execute("EXPLAIN QUERY PLAN " + sql, ("a", "b")))
    finally:
        c.close()


def _written(db: str, n: int) -> tuple[MilvusStore, str, list[dict]]:
    """A store on *db* (its engine started here) holding *n* rows."""
    s = MilvusStore(db, dimension=DIM)
    written = rows(0, n)
    s.upsert(written)
    return s, s.collection, written


def test_a_new_collection_is_made_with_its_primary_keys_indexed(db: str) -> None:
    s, table, written = _written(db, 20)
    s.delete_ids([r["chunk_hash"] for r in written[:5]])  # the engine's own delete, through the index
    assert s.count() == 15
    s.close()
    lite_broker.stop_server(db)
    assert ("index", f"{table}__milvus_id") in _objects(db)
    assert "USING INDEX" in _plan(db, table)
    assert oct(os.stat(db).st_mode & 0o777) == oct(0o600)
    s = MilvusStore(db)
    assert s.count() == 15
    kept = {r["chunk_hash"] for r in s.rows_for_ids([r["chunk_hash"] for r in written], ["chunk_hash"])}
    assert kept == {r["chunk_hash"] for r in written[5:]}
    s.close()


def test_a_database_from_before_gets_the_index_at_the_engines_next_start(db: str) -> None:
    s, table, written = _written(db, 40)
    s.close()
    lite_broker.stop_server(db)
    c = sqlite3.connect(db)  # a database indexed before this version: no index of ours
    c.execute(f'DROP INDEX "{table}__milvus_id"')
    c.commit()
    c.close()
    assert "USING INDEX" not in _plan(db, table)

    s = MilvusStore(db)  # the engine starts again, and the index is made first
    s.delete_ids([r["chunk_hash"] for r in written[:10]])
    s.upsert(rows(100, 5))
    assert s.count() == 35
    hits = s.search(written[20]["embedding"], "apple", top_k=3)
    assert hits and hits[0]["chunk_hash"] == written[20]["chunk_hash"]
    s.close()
    lite_broker.stop_server(db)
    assert "USING INDEX" in _plan(db, table)


def test_other_files_and_names_are_left_alone(tmp_path: Path) -> None:
    # An SQLite file that is no Milvus Lite database: untouched, even with a table of that shape.
    other = tmp_path / "other.db"
    c = sqlite3.connect(other)
    c.execute('CREATE TABLE "t" (id INTEGER PRIMARY KEY, milvus_id VARCHAR(1024), data BLOB)')
    c.commit()
    c.close()
    assert pk_index.prepare(str(other), ["t", "u"]) == []
    assert _objects(str(other)) == {("table", "t")}

    # A damaged file: nothing raised, nothing written (the engine reports it).
    damaged = tmp_path / "damaged.db"
    damaged.write_bytes(b"SQLite format 3\x00" + os.urandom(4000))
    before = damaged.read_bytes()
    assert pk_index.prepare(str(damaged), ["memsearch_chunks"]) == []
    assert damaged.read_bytes() == before

    # A missing file with nothing asked for is not created.
    assert pk_index.prepare(str(tmp_path / "absent.db")) == []
    assert not (tmp_path / "absent.db").exists()

    # Names the engine would refuse (or that read as options) make no table.
    fresh = tmp_path / "fresh.db"
    assert pk_index.prepare(str(fresh), ['a"b', "--x", "1abc", "ok_name"]) == ["ok_name"]
    assert _objects(str(fresh)) == {("table", "ok_name"), ("index", "ok_name__milvus_id")}

    # A collection whose table has another layout is skipped.
    c = sqlite3.connect(fresh)
    c.execute("CREATE TABLE collection_meta (id INTEGER PRIMARY KEY, collection_name VARCHAR(1024))")
    c.execute("INSERT INTO collection_meta (collection_name) VALUES ('odd')")
    c.execute('CREATE TABLE "odd" (id INTEGER PRIMARY KEY, other TEXT)')
    c.commit()
    c.close()
    assert pk_index.prepare(str(fresh)) == []
    assert ("index", "odd__milvus_id") not in _objects(str(fresh))
