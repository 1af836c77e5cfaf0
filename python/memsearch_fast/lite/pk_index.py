"""An SQLite index on the primary keys of a Milvus Lite 2.x database.

Milvus Lite 2.x keeps each collection's rows in a table ``(id, milvus_id,
data)`` with no index on ``milvus_id``, and deletes by primary key with
``DELETE ... WHERE milvus_id IN (...)`` after reading the same rows back for
the BM25 statistics: two scans of the whole table. At 1.2 M chunks (1 GB of
journals) deleting one edited file's five rows took 2.1 s, and every search
waited behind it; with the index it takes 30-40 ms, and the row count that
``stats`` asks for drops from 9 s to under 1 s (docs/scale.md).

The engine never learns of the index: SQLite uses it for the engine's own
statements, keeps it on every insert and drops it with the table. It is
written only while no engine has the database open (the server holds the
engine lock, :class:`memsearch_fast.lite.engine.Lite2Engine`): the engine
sets no busy timeout, so a write beside it could fail its statements.
A collection the engine creates later gets its index at the engine's next
start, unless its table was made here first: ``tables`` names collections a
client is about to use, and an absent one gets the engine's own empty table
with the index (the engine's ``CREATE TABLE IF NOT EXISTS`` keeps it).

Anything unexpected (another layout, a damaged or read-only file) leaves the
database as it is: the engine reports what it finds itself.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sqlite3
import urllib.parse
from collections.abc import Iterable

logger = logging.getLogger(__name__)

#: Off: the engine's tables are left as it makes them (for comparisons).
ENV = "MEMSEARCH_LITE_PK_INDEX"
#: The engine's table of a collection (Milvus Lite 2.5), made the same way.
_COLUMNS = ["id", "milvus_id", "data"]
#: A collection name the engine accepts (and no option).
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,254}")


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _table_sql(name: str) -> str:
    return f"CREATE TABLE IF NOT EXISTS {_ident(name)} (id INTEGER PRIMARY KEY, milvus_id VARCHAR(1024), data BLOB)"


def _index_sql(name: str) -> str:
    return f"CREATE INDEX IF NOT EXISTS {_ident(name + '__milvus_id')} ON {_ident(name)} (milvus_id)"


def prepare(db_path: str, tables: Iterable[str] = ()) -> list[str]:
    """Index the primary keys of every collection in ``db_path`` and make the
    tables of ``tables`` that do not exist yet; returns the tables indexed now.

    Call it only while no engine has the database open.
    """
    from memsearch_fast.config import environment

    if not environment.flag(ENV):
        return []
    wanted = [t for t in dict.fromkeys(tables) if NAME.fullmatch(t)]
    exists = os.path.isfile(db_path)
    if not exists and not wanted:
        return []
    mode = "rw" if exists else "rwc"
    try:
        db = sqlite3.connect(f"file:{urllib.parse.quote(db_path)}?mode={mode}", uri=True, timeout=5.0)
    except sqlite3.Error as exc:
        logger.debug("primary keys of %s not indexed: %s", db_path, exc)
        return []
    try:
        return _prepare(db, wanted)
    except sqlite3.Error as exc:
        logger.info("primary keys of %s not indexed: %s", db_path, exc)
        return []
    finally:
        with contextlib.suppress(sqlite3.Error):
            db.close()


def _prepare(db: sqlite3.Connection, wanted: list[str]) -> list[str]:
    objects = {(kind, name) for kind, name in db.execute("SELECT type, name FROM sqlite_master")}
    names = {name for kind, name in objects if kind == "table"}
    if names and "collection_meta" not in names:
        return []  # not a Milvus Lite 2.x database
    collections = (
        [r[0] for r in db.execute("SELECT DISTINCT collection_name FROM collection_meta")]
        if "collection_meta" in names
        else []
    )
    done: list[str] = []
    with db:  # one transaction
        for name in dict.fromkeys([*collections, *wanted]):
            if not isinstance(name, str) or not NAME.fullmatch(name):
                continue
            if name not in names:
                if name in collections:
                    continue  # the engine's own business
                db.execute(_table_sql(name))
            elif [r[1] for r in db.execute(f"PRAGMA table_info({_ident(name)})")] != _COLUMNS:
                continue
            if ("index", name + "__milvus_id") not in objects:
                db.execute(_index_sql(name))
                done.append(name)
    return done
