"""The span vectors of a Milvus Lite database, in a file of their own beside it.

Milvus Lite holds its whole database in memory and its writes slow as it
grows: span rows (a dozen per chunk) made a gigabyte of journals need 13 GB
of RAM and a day to index (docs/store.md, "Where the spans live"). Here they
live in ``<database>.spans``, an SQLite file the process opens itself: a row
per chunk holding its spans packed (int8 codes in the held directions of the
collection's basis, :func:`memsearch_fast.store.copy.spans.held_directions`, a scale, the lines,
the 8 bytes of the span text's hash), written in one transaction per batch, so a
chunk has all its spans or none (kill -9 at any point), and a table of span
text keys for the reuse of a moved chunk's vectors. The in-memory copy takes
the codes as they are (:meth:`SpanFile.iter_codes`).

:class:`SpanFile` answers what :class:`.spans.SpanStore` answers (the span
collection a Milvus server keeps), so the index run, search and the copy use
either. A database whose spans were a collection moves them here on its next
index run (:meth:`SpanFile.adopt`), nothing embedded again.

The file is the user's: a link, another owner's file or a damaged one is
refused in one line, and a writer moves a damaged one aside and the next
index run gives every chunk its spans again from the database's chunks.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import sqlite3
import stat
import threading
import urllib.parse
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from memsearch_fast.errors import StoreError, UnusableDatabaseError, others_file, way_on
from memsearch_fast.store.spans.columns import ChunkSpans, Columns
from memsearch_fast.store.spans.reads import BATCH, SpanReads, _Packed, _row

if TYPE_CHECKING:
    from memsearch_fast.store.schema import StoreSchema
    from memsearch_fast.store.spans.basis import Basis
    from memsearch_fast.store.spans.collection import SpanStore

logger = logging.getLogger(__name__)

SUFFIX = ".spans"
#: The layout of the rows (:func:`memsearch_fast.store.spans.reads.record`), kept as SQLite's user_version.
FORMAT = 1
#: Leave the file on the companion collection (``collection``) instead: for comparisons.
ENV_STORE = "MEMSEARCH_SPAN_STORE"
_SIDE = ("", "-wal", "-shm", "-journal")


def path_of(db_path: str) -> str:
    return db_path + SUFFIX


def check_file(path: str) -> None:
    """Refuse a span file (or its journal) that is a link, not a regular file, or
    another user's: it could send writes elsewhere or plant vectors."""
    for side in _SIDE:
        p = path + side
        try:
            st = os.lstat(p)
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise UnusableDatabaseError(f"{p} cannot be read ({exc.strerror}); remove it") from None
        if stat.S_ISLNK(st.st_mode) or not stat.S_ISREG(st.st_mode):
            raise UnusableDatabaseError(f"{p} is not a regular file (a link or other); refusing it: {way_on(p)}")
        if st.st_uid != os.geteuid():
            raise UnusableDatabaseError(others_file(p, st.st_uid))


class SpanFile(SpanReads):
    """The spans of *store*'s collection in ``<database>.spans``."""

    def __init__(self, store: StoreSchema, db_path: str) -> None:
        import re

        self.store = store
        self.collection = store.collection
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", self.collection):
            raise StoreError(f"collection name {self.collection!r} is not a plain identifier")
        self.path = path_of(db_path)
        self._chunks = f'"{self.collection}__span_chunks"'
        self._texts = f'"{self.collection}__span_texts"'
        self._db: sqlite3.Connection | None = None
        self._lock = threading.RLock()
        self._meta: tuple[int, str, bool] | None = None  # dim, basis payload, refused
        self._counted: tuple[Any, int] | None = None  # (the file's stamps, its spans): scans_all

    # -- the file ---------------------------------------------------------------------

    def _conn(self, *, create: bool) -> sqlite3.Connection | None:
        if self._db is not None:
            return self._db
        check_file(self.path)
        if not create and not os.path.exists(self.path):
            return None
        try:
            db = self._open()
        except sqlite3.DatabaseError as exc:
            if not create:
                logger.warning("span vectors not read: %s is damaged (%s)", self.path, exc)
                return None
            self._set_aside(exc)
            db = self._open()
        self._db = db
        return db

    def _open(self) -> sqlite3.Connection:
        try:
            return self._open_to_write()
        except (OSError, sqlite3.OperationalError):
            if not os.path.isfile(self.path):
                raise
            # Another user's database read through its server, a read-only directory or
            # mount (no journal can be made beside it): read as it is, without locks.
            uri = f"file:{urllib.parse.quote(self.path)}?mode=ro&immutable=1"
            db = sqlite3.connect(uri, uri=True, timeout=60, check_same_thread=False)
            self._check_format(db)
            return db

    def _open_to_write(self) -> sqlite3.Connection:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        os.close(fd)  # made private, never through a link; SQLite opens the same name
        db = sqlite3.connect(self.path, timeout=60, check_same_thread=False, isolation_level=None)
        try:
            # A chunk's row is 1-3 KB: 4 KB pages hold two with a quarter left empty, 16 KB
            # pages ten (set before the first table, so on a new file only).
            db.execute("PRAGMA page_size=16384")
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            # The text keys arrive in random order: a B-tree whose pages stay cached
            # takes them at a fraction of the cost (a page cache of 32 MB at most).
            db.execute("PRAGMA cache_size=-32768")
            if db.execute("PRAGMA user_version").fetchone()[0] == 0:
                db.execute(f"PRAGMA user_version={FORMAT}")
            self._check_format(db)
            db.execute(
                "CREATE TABLE IF NOT EXISTS collections "
                "(name TEXT PRIMARY KEY, dim INTEGER, basis TEXT, refused INTEGER)"
            )
        except BaseException:
            db.close()
            raise
        return db

    def _check_format(self, db: sqlite3.Connection) -> None:
        found = db.execute("PRAGMA user_version").fetchone()[0]
        if found != FORMAT:
            db.close()
            raise sqlite3.DatabaseError(f"span file format {found}, not {FORMAT}")

    def _set_aside(self, exc: Exception) -> None:
        aside = self.path + ".damaged"
        logger.warning(
            "%s is damaged (%s): moved to %s; the next index run gives every chunk its spans again",
            self.path,
            exc,
            aside,
        )
        os.replace(self.path, aside)
        for side in _SIDE[1:]:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path + side)

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None

    def _read_meta(self) -> tuple[int, str, bool] | None:
        if self._meta is None:
            db = self._conn(create=False)
            if db is None:
                return None
            try:
                row = db.execute(
                    "SELECT dim, basis, refused FROM collections WHERE name = ?", (self.collection,)
                ).fetchone()
            except sqlite3.DatabaseError as exc:
                logger.warning("span vectors not read: %s is damaged (%s)", self.path, exc)
                return None
            if row is None:
                return None
            dim = self.store.dimension
            if dim is not None and int(row[0]) != dim:
                return None  # another model's: dropped by the next create
            self._meta = (int(row[0]), str(row[1] or ""), bool(row[2]))
        return self._meta

    # -- the collection's spans ----------------------------------------------------------

    @property
    def exists(self) -> bool:
        with self._lock:
            self._meta = None  # read again: another process may have made or dropped them
            return self._read_meta() is not None

    def present(self) -> bool:
        return self.exists

    def scans_all(self) -> bool:
        """Whether a search scores every span: up to ``MEMSEARCH_SPAN_SCAN_MAX`` of them
        (about 1 µs each with the file in the page cache, 2.4 µs at 1 GB of journals;
        docs/scale.md). Past it, :meth:`memsearch_fast.store.search.StoreSearch.search` scores
        the spans of the chunks its dense and BM25 lists found. The count is taken
        again only when the file changed, and only as far as the cap."""
        from memsearch_fast._os import file_stamp
        from memsearch_fast.config import environment

        cap = environment.integer("MEMSEARCH_SPAN_SCAN_MAX")
        stamp = (file_stamp(self.path), file_stamp(self.path + "-wal"), cap)
        counted = self._counted
        if counted is None or counted[0] != stamp:
            counted = self._counted = (stamp, self.count_past(cap))
        return counted[1] <= cap

    @property
    def half(self) -> bool:
        return True

    @property
    def basis(self) -> Basis | None:
        from memsearch_fast.store.spans.basis import read

        meta = self._read_meta()
        return read(meta[1]) if meta and meta[1] else None

    @property
    def basis_digest(self) -> str:
        basis = self.basis
        return basis.digest if basis else ""

    def _width(self) -> int:
        basis = self.basis
        if basis is not None:
            return basis.dims
        meta = self._read_meta()
        assert meta is not None
        return meta[0]

    def _directions(self) -> np.ndarray | None:
        """The rows a code's components lie along (None: the model's own axes)."""
        basis = self.basis
        if basis is None:
            return None
        return _held(basis.payload)

    def create(self, sample: Any = None) -> bool:
        from memsearch_fast.store.spans.basis import fit

        if self.exists:
            return False
        return self._create(fit(sample) if sample is not None and len(sample) else None)

    def _create(self, basis: Basis | None, refused: bool = False) -> bool:
        dim = self.store.dimension
        if dim is None:
            raise StoreError("span vectors need the collection's dimension")
        with self._transaction() as db:
            assert db is not None
            if db.execute("SELECT 1 FROM collections WHERE name = ? AND dim = ?", (self.collection, dim)).fetchone():
                return False  # another writer made them meanwhile
            self._drop_tables(db)
            db.execute(
                f"CREATE TABLE {self._chunks} (id INTEGER PRIMARY KEY, chunk TEXT UNIQUE NOT NULL, "
                "source TEXT NOT NULL, start_line INTEGER, end_line INTEGER, n INTEGER NOT NULL, "
                "data BLOB NOT NULL)"
            )
            db.execute(f'CREATE INDEX "{self.collection}__span_sources" ON {self._chunks} (source)')
            db.execute(
                f"CREATE TABLE {self._texts} (key INTEGER NOT NULL, chunk INTEGER NOT NULL, "
                "PRIMARY KEY (key, chunk)) WITHOUT ROWID"
            )
            db.execute(
                "INSERT INTO collections VALUES (?, ?, ?, ?)",
                (self.collection, dim, basis.describe("") if basis else "", int(refused)),
            )
        self._meta = None
        return True

    def _drop_tables(self, db: sqlite3.Connection) -> None:
        db.execute(f"DROP TABLE IF EXISTS {self._chunks}")
        db.execute(f"DROP TABLE IF EXISTS {self._texts}")
        db.execute("DELETE FROM collections WHERE name = ?", (self.collection,))

    def drop(self) -> None:
        with self._transaction(create=False) as db:
            if db is None:
                return
            self._drop_tables(db)
        self._meta = None

    def flush(self) -> None:
        """Nothing: each write is committed in its own transaction."""

    # -- writes -----------------------------------------------------------------------

    def _encode(self, vectors: Any) -> tuple[np.ndarray, np.ndarray]:
        """Vectors of the model's space as codes along the held directions."""
        from memsearch_fast.store.copy.spans import quantised

        m = np.asarray(vectors, dtype=np.float32).reshape(len(vectors), -1)
        held = self._directions()
        if held is not None:
            m = m @ held.T.astype(np.float32)
        return quantised(m, m.shape[1])

    def put(self, span_rows: list[dict[str, Any]], own_rows: list[dict[str, Any]], *, replace: bool = True) -> int:
        """Store the spans of the chunks of *own_rows* (each chunk's row 0, carrying
        its lines), replacing what those chunks had (whatever *replace* says: the
        lookup costs nothing here): a chunk's spans land whole."""
        if not own_rows:
            return 0
        by_chunk: dict[str, list[int]] = {}
        for i, r in enumerate(span_rows):
            by_chunk.setdefault(str(r["chunk_hash"]), []).append(i)
        owners = [(str(o["chunk_hash"]), str(o["source"]), int(o["start_line"]), int(o["end_line"])) for o in own_rows]
        spans = Columns.from_rows(span_rows, self._codes)
        self._write_chunks(owners, [by_chunk.get(cid, []) for cid, *_ in owners], spans)
        return len(span_rows) + len(own_rows)

    def put_chunks(self, chunks: Sequence[ChunkSpans], *, replace: bool = True) -> int:
        """:meth:`put` for chunks handed over with their spans (no row dicts)."""
        if not chunks:
            return 0
        spans, picks = Columns.from_chunks(chunks, self._codes)
        self._write_chunks([(c.chunk_hash, c.source, c.start_line, c.end_line) for c in chunks], picks, spans)
        return len(spans.span_index) + len(chunks)

    def _codes(self, vectors: list[Any]) -> tuple[np.ndarray, np.ndarray]:
        return self._encode(vectors) if vectors else (np.zeros((0, 0), np.int8), np.zeros(0, np.float32))

    def _write_chunks(self, owners: list[tuple[str, str, int, int]], picks: Sequence[Any], spans: Columns) -> None:
        """One transaction: each owner's old spans out, its spans (*picks* of *spans*) in, whole."""
        with self._transaction() as db:
            assert db is not None
            self._delete_in(db, [cid for cid, *_ in owners])
            rids: list[int] = []
            ats: list[np.ndarray] = []
            for (cid, source, start, end), pick in zip(owners, picks, strict=True):
                at = np.asarray(pick, np.int64)
                cur = db.execute(
                    f"INSERT INTO {self._chunks} (chunk, source, start_line, end_line, n, data) "
                    "VALUES (?, ?, ?, ?, ?, ?)",
                    (cid, source, start, end, len(at), spans.take(at)),
                )
                rids.append(int(cur.lastrowid or 0))
                ats.append(at)
            # Each span's text key and its chunk's row, for the reuse of stored vectors.
            keys = spans.keys[np.concatenate(ats)].tolist() if ats else []
            rows = np.repeat(np.asarray(rids, np.int64), [len(at) for at in ats]).tolist()
            db.executemany(f"INSERT OR IGNORE INTO {self._texts} VALUES (?, ?)", zip(keys, rows, strict=True))

    def insert(self, rows: list[dict[str, Any]]) -> int:
        """Rows as the companion collection takes them: each chunk's row 0 with the
        span rows given with it (:meth:`put`)."""
        own = [r for r in rows if str(r["span_id"]).endswith(":0")]
        return self.put([r for r in rows if not str(r["span_id"]).endswith(":0")], own)

    upsert = insert

    def _delete_in(self, db: sqlite3.Connection, chunk_hashes: list[str]) -> None:
        for i in range(0, len(chunk_hashes), BATCH):
            part = chunk_hashes[i : i + BATCH]
            marks = ",".join("?" * len(part))
            found = db.execute(f"SELECT id, n, data FROM {self._chunks} WHERE chunk IN ({marks})", part).fetchall()
            self._forget(db, found)

    def _forget(self, db: sqlite3.Connection, found: list[tuple[int, int, bytes]]) -> None:
        width = self._width()
        gone = [(int(k), rid) for rid, n, data in found for k in _Packed(data, n, width).key_ints]
        db.executemany(f"DELETE FROM {self._texts} WHERE key = ? AND chunk = ?", gone)
        db.executemany(f"DELETE FROM {self._chunks} WHERE id = ?", [(rid,) for rid, _, _ in found])

    def delete_chunks(self, chunk_hashes: Iterable[str]) -> None:
        wanted = list(dict.fromkeys(chunk_hashes))
        if not wanted or not self.exists:
            return
        self._write(lambda db: self._delete_in(db, wanted))

    def delete_sources(self, sources: Iterable[str]) -> None:
        wanted = list(dict.fromkeys(sources))
        if not wanted or not self.exists:
            return

        def delete(db: sqlite3.Connection) -> None:
            for i in range(0, len(wanted), BATCH):
                part = wanted[i : i + BATCH]
                marks = ",".join("?" * len(part))
                sql = f"SELECT id, n, data FROM {self._chunks} WHERE source IN ({marks})"
                self._forget(db, db.execute(sql, part).fetchall())

        self._write(delete)

    @contextlib.contextmanager
    def _transaction(self, *, create: bool = True) -> Iterator[sqlite3.Connection | None]:
        """The connection inside one write transaction (None: no file to write, when
        not *create*): committed when the block ends, rolled back when it raises."""
        with self._lock:
            db = self._conn(create=create)
            if db is None:
                yield None
                return
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise

    def _write(self, fn: Any) -> None:
        with self._transaction() as db:
            assert db is not None
            fn(db)

    def _query(self, sql: str, args: Iterable[Any] = ()) -> list[tuple[Any, ...]]:
        with self._lock:
            db = self._conn(create=False)
            if db is None or self._read_meta() is None:
                return []
            try:
                return db.execute(sql, tuple(args)).fetchall()
            except sqlite3.OperationalError as exc:
                if "no such table" in str(exc):
                    return []  # dropped by another process meanwhile
                raise

    # -- the basis --------------------------------------------------------------------

    def refit(self) -> bool:
        """Once spans kept in every dimension (the first write too small to fit on)
        are enough, store them again along fitted directions (:mod:`memsearch_fast.store.spans.basis`)."""
        from memsearch_fast.store.spans import basis as span_basis

        meta = self._read_meta() if self.exists else None
        if meta is None or meta[1] or meta[2]:
            return False
        if not span_basis.FIT_ROWS <= self.count() <= span_basis.REFIT_MAX:
            return False
        rows = [r for page in self.iter_vectors() for r in page]
        basis = span_basis.fit([r["embedding"] for r in rows])
        if basis is None:
            return False
        chunks = self._query(f"SELECT chunk, source, start_line, end_line FROM {self._chunks}")
        with self._lock:
            self.drop()
            self._create(basis)
            self.put(rows, [_row(c, s, 0, a, b, "") for c, s, a, b in chunks])  # each row keeps its text key
        return True

    # -- a collection's spans, moved here ------------------------------------------------

    def adopt(self, legacy: SpanStore) -> int:
        """Move the spans of *legacy* (a span collection of this database, made
        before they lived here) into the file, then drop it; the chunks moved.
        Its vectors are taken as stored: nothing is embedded again."""
        if not legacy.present():
            return 0
        if not legacy.exists:
            return 0
        basis = legacy.basis
        if self.exists:
            self.drop()
        self._create(basis, refused=getattr(legacy, "_refused", False))
        own: dict[str, dict[str, Any]] = {}  # a chunk with its row 0 has all its spans
        for page in legacy.iter_rows():
            own.update((str(r["chunk_hash"]), r) for r in page if str(r["span_id"]).endswith(":0"))
        sources = sorted({str(o["source"]) for o in own.values()})
        moved = 0
        for i in range(0, len(sources), 64):  # every span of these files at once: a chunk lands whole
            rows = [r for page in legacy.iter_vectors(sources[i : i + 64]) for r in page if r["chunk_hash"] in own]
            chunks = list(dict.fromkeys(str(r["chunk_hash"]) for r in rows))
            self.put(rows, [own[c] for c in chunks])
            moved += len(chunks)
        legacy.drop()
        return moved


@functools.lru_cache(maxsize=8)
def _held(payload: str) -> np.ndarray:
    """The held directions of the basis *payload* names (:func:`memsearch_fast.store.copy.spans.held_directions`)."""
    from memsearch_fast.store.copy.spans import held_directions
    from memsearch_fast.store.spans.basis import read

    basis = read("\nbasis:" + payload)
    assert basis is not None
    return held_directions(basis.rows)
