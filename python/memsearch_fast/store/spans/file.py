"""The span vectors of a Milvus Lite database, in a file of their own beside it.

Milvus Lite holds its whole database in memory and its writes slow as it
grows: span rows (a dozen per chunk) made a gigabyte of journals need 13 GB
of RAM and a day to index (docs/store.md, "Where the spans live"). Here they
live in ``<database>.spans``, an SQLite file the process opens itself: a row
per chunk holding its spans packed (6-bit codes in the held directions of the
collection's basis, :func:`memsearch_fast.store.copy.spans.held_directions`, a
scale, the lines, the 8 bytes of the span text's hash: :mod:`.layout`), written
in one transaction per batch, so a chunk has all its spans or none (kill -9 at
any point). The in-memory copy takes the codes as they are
(:meth:`SpanFile.iter_codes`).

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
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from memsearch_fast.errors import StoreError, UnusableDatabaseError, others_file, way_on
from memsearch_fast.store.spans.columns import ChunkSpans, Columns
from memsearch_fast.store.spans.layout import IDENTIFIER, chunk_key, create_tables
from memsearch_fast.store.spans.reads import BATCH, Page, SpanReads

if TYPE_CHECKING:
    from memsearch_fast.store.schema import StoreSchema
    from memsearch_fast.store.spans.basis import Basis
    from memsearch_fast.store.spans.collection import SpanStore

logger = logging.getLogger(__name__)

SUFFIX = ".spans"
#: The layout of the rows (:func:`memsearch_fast.store.spans.layout.record`), kept as SQLite's user_version.
FORMAT = 2
#: Formats read: a file of format 1 is converted by its next write (:mod:`.upgrade`).
READ = (1, 2)
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
        self.store = store
        self.collection = store.collection
        if not IDENTIFIER.fullmatch(self.collection):
            raise StoreError(f"collection name {self.collection!r} is not a plain identifier")
        self.path = path_of(db_path)
        self._rows = f'"{self.collection}__span_rows"'
        self._paths = f'"{self.collection}__span_paths"'
        self._fmt = FORMAT  # the file's, once open
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
            # The chunks' ids arrive in random order: a B-tree whose pages stay cached
            # takes them at a fraction of the cost (a page cache of 32 MB at most).
            db.execute("PRAGMA cache_size=-32768")
            if db.execute("PRAGMA user_version").fetchone()[0] == 0:
                db.execute(f"PRAGMA user_version={FORMAT}")  # a new file
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
        if found not in READ:
            if db is not self._db:
                db.close()  # one being opened; an open one is let go by the caller
            raise sqlite3.DatabaseError(f"span file format {found}, not {FORMAT}")
        self._fmt = int(found)

    def _set_aside(self, exc: Exception) -> None:
        aside = self.path + ".damaged"
        what = "%s is damaged (%s): moved to %s; the next index run gives every chunk its spans again"
        logger.warning(what, self.path, exc, aside)
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
            try:  # the format too: another process may have converted the file (:meth:`_upgrade`)
                fmt = db.execute("PRAGMA user_version").fetchone()[0]
                row = db.execute("SELECT dim, basis, refused FROM collections WHERE name = ?", (self.collection,))
                row = row.fetchone()
            except sqlite3.DatabaseError as exc:
                logger.warning("span vectors not read: %s is damaged (%s)", self.path, exc)
                return None
            self._fmt = int(fmt) if fmt in READ else self._fmt
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
            create_tables(db, self.collection)
            db.execute(
                "INSERT INTO collections VALUES (?, ?, ?, ?)",
                (self.collection, dim, basis.describe("") if basis else "", int(refused)),
            )
        self._meta = None
        return True

    def _drop_tables(self, db: sqlite3.Connection) -> None:
        db.execute(f"DROP TABLE IF EXISTS {self._rows}")
        db.execute(f"DROP TABLE IF EXISTS {self._paths}")
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
        """Vectors of the model's space as 6-bit codes along the held directions."""
        from memsearch_fast.store.spans.layout import quantised6

        m = np.asarray(vectors, dtype=np.float32).reshape(len(vectors), -1)
        held = self._directions()
        if held is not None:
            m = m @ held.T.astype(np.float32)
        return quantised6(m)

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

    def _codes(self, vectors: Any) -> tuple[np.ndarray, np.ndarray]:
        return self._encode(vectors) if len(vectors) else (np.zeros((0, 0), np.int8), np.zeros(0, np.float32))

    def _write_chunks(self, owners: list[tuple[str, str, int, int]], picks: Sequence[Any], spans: Columns) -> None:
        """One transaction: each owner's old spans out, its spans (*picks* of *spans*) in, whole."""
        with self._transaction() as db:
            assert db is not None
            self._delete_in(db, [cid for cid, *_ in owners])
            paths = self._path_ids(db, [source for _, source, _, _ in owners])
            blobs = spans.take_each(picks, [start for _, _, start, _ in owners])
            db.executemany(
                f"INSERT INTO {self._rows} (chunk, source, start_line, end_line, n, data) VALUES (?, ?, ?, ?, ?, ?)",
                (
                    (chunk_key(cid), paths[source], start, end, len(pick), blob)
                    for (cid, source, start, end), pick, blob in zip(owners, picks, blobs, strict=True)
                ),
            )

    def _path_ids(self, db: sqlite3.Connection, sources: list[str]) -> dict[str, int]:
        """The ids of these files' paths, made where new."""
        wanted = list(dict.fromkeys(sources))
        db.executemany(f"INSERT OR IGNORE INTO {self._paths} (path) VALUES (?)", ((p,) for p in wanted))
        out: dict[str, int] = {}
        for i in range(0, len(wanted), BATCH):
            part = wanted[i : i + BATCH]
            sql = f"SELECT path, id FROM {self._paths} WHERE path IN ({','.join('?' * len(part))})"
            out.update((str(p), int(rid)) for p, rid in db.execute(sql, part))
        return out

    def insert(self, rows: list[dict[str, Any]]) -> int:
        """Rows as the companion collection takes them: each chunk's row 0 with the
        span rows given with it (:meth:`put`)."""
        own = [r for r in rows if str(r["span_id"]).endswith(":0")]
        return self.put([r for r in rows if not str(r["span_id"]).endswith(":0")], own)

    upsert = insert

    def _delete_in(self, db: sqlite3.Connection, chunk_hashes: list[str]) -> None:
        for i in range(0, len(chunk_hashes), BATCH):
            part = [chunk_key(c) for c in chunk_hashes[i : i + BATCH]]
            db.execute(f"DELETE FROM {self._rows} WHERE chunk IN ({','.join('?' * len(part))})", part)

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
                paths = f"{self._paths} WHERE path IN ({','.join('?' * len(part))})"
                db.execute(f"DELETE FROM {self._rows} WHERE source IN (SELECT id FROM {paths})", part)
                db.execute(f"DELETE FROM {paths}", part)

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
                converted = self._upgrade(db)
                yield db
                db.execute("COMMIT")
            except BaseException:
                with contextlib.suppress(sqlite3.Error):
                    if db.in_transaction:  # SQLite rolls back by itself on some errors (a full disk)
                        db.execute("ROLLBACK")
                    self._check_format(db)  # a conversion rolled back with it
                raise
            if converted:  # the old tables' pages given back to the disk (once)
                with contextlib.suppress(sqlite3.Error):
                    db.execute("VACUUM")
                    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def _upgrade(self, db: sqlite3.Connection) -> bool:
        """A file of format 1 converted inside the write transaction begun: once."""
        self._check_format(db)  # another process may have converted it meanwhile
        if self._fmt == FORMAT:
            return False
        from memsearch_fast.store.spans.upgrade import convert

        moved = convert(db)
        db.execute(f"PRAGMA user_version={FORMAT}")
        self._fmt, self._meta = FORMAT, None
        logger.info("%s: %d spans stored in the span file's format %d", self.path, moved, FORMAT)
        return True

    def _write(self, fn: Any) -> None:
        with self._transaction() as db:
            assert db is not None
            fn(db)

    def _read(self, build: Callable[[], str], args: Iterable[Any] | Callable[[], Iterable[Any]] = ()) -> Page:
        """The rows of the query *build* writes, tagged with the format it was written
        for; written and asked again when another process converted the file meanwhile
        (its tables are gone, the ids of its rows kept)."""
        with self._lock:
            for _ in range(2):
                db = self._conn(create=False)
                if db is None or self._read_meta() is None:
                    return Page((), self._fmt)
                fmt = self._fmt
                try:
                    return Page(db.execute(build(), tuple(args() if callable(args) else args)).fetchall(), fmt)
                except sqlite3.OperationalError as exc:
                    if "no such table" not in str(exc):
                        raise
                self._meta = None  # dropped or converted by another process meanwhile: read again
                if self._read_meta() is None or self._fmt == fmt:
                    break
            return Page((), self._fmt)

    # -- the basis --------------------------------------------------------------------

    def refit(self) -> bool:
        """Once spans kept in every dimension (the first write too small to fit on)
        are enough, store them again along fitted directions
        (:func:`memsearch_fast.store.spans.upgrade.refit`)."""
        from memsearch_fast.store.spans.upgrade import refit

        with self._lock:
            meta = self._read_meta() if self.exists else None
            return meta is not None and not meta[1] and not meta[2] and refit(self)

    # -- a collection's spans, moved here ------------------------------------------------

    def adopt(self, legacy: SpanStore) -> int:
        """Move the spans of *legacy*, a span collection of this database, here
        (:func:`memsearch_fast.store.spans.upgrade.adopt`); the chunks moved."""
        from memsearch_fast.store.spans.upgrade import adopt

        return adopt(self, legacy)


@functools.lru_cache(maxsize=8)
def _held(payload: str) -> np.ndarray:
    """The held directions of the basis *payload* names (:func:`memsearch_fast.store.copy.spans.held_directions`)."""
    from memsearch_fast.store.copy.spans import held_directions
    from memsearch_fast.store.spans.basis import read

    basis = read("\nbasis:" + payload)
    assert basis is not None
    return held_directions(basis.rows)
