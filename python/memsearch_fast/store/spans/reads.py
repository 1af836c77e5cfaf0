"""Reading a span file (:mod:`memsearch_fast.store.spans.file`): a chunk's packed spans, the pages,
the codes the in-memory copy takes as they are, the reuse of stored vectors,
and the search of a process that holds no copy."""

from __future__ import annotations

import contextlib
import hashlib
import itertools
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np

from memsearch_fast.store.copy.spans import CodePage
from memsearch_fast.store.spans.layout import Spans, chunk_hash, chunk_key

#: Keys per ``IN (...)`` query, chunks per page read.
BATCH = 500
#: Bytes of a span text's key: its content hash.
KEY = 8
#: What Lite's scan of a float16 row costs, in float32 rows (3.5 at 5 MB of journals).
HALF_SCAN_COST = 4


def text_key(text_hash: str) -> bytes:
    """The 8 bytes of a span text's hash (:func:`memsearch_fast._core.content_hash`,
    16 hex digits; any other string is hashed to 8 bytes), the index key too; its
    hex is the hash again."""
    if len(text_hash) == 2 * KEY:
        with contextlib.suppress(ValueError):
            return bytes.fromhex(text_hash)
    return hashlib.blake2b(text_hash.encode("utf-8", "surrogateescape"), digest_size=KEY).digest()


#: Chunks summed a query at a time by :meth:`SpanReads.count_past`.
COUNT_PAGE = 10_000


def _key_int(key: bytes) -> int:
    return int.from_bytes(key[:8], "little", signed=True)


def key_bytes(key: int) -> bytes:
    return int(key).to_bytes(KEY, "little", signed=True)


class Page(list[tuple[Any, ...]]):
    """Rows of a span file and the format they were read in (another process may
    convert the file between two pages: :meth:`SpanReads._read`)."""

    __slots__ = ("fmt",)

    def __init__(self, rows: Iterable[tuple[Any, ...]], fmt: int) -> None:
        super().__init__(rows)
        self.fmt = fmt


def _joined(page: Page, width: int) -> tuple[list[tuple[Any, ...]], np.ndarray, Spans] | None:
    """The rows of *page* that hold spans, how many each, and all their spans
    unpacked at once (None: no spans)."""
    rows = [r for r in page if r[4]]
    if not rows:
        return None
    counts = np.fromiter((int(r[4]) for r in rows), np.int64, len(rows))
    first = np.repeat(np.fromiter((int(r[2] or 0) for r in rows), np.int64, len(rows)), counts)
    return rows, counts, Spans(b"".join(r[5] for r in rows), int(counts.sum()), width, page.fmt, first)


class SpanReads:
    """The reads of :class:`memsearch_fast.store.spans.file.SpanFile` (which supplies the
    file, its format and the layout of its tables)."""

    collection: str
    _rows: str  # format 2's tables
    _paths: str
    _fmt: int  # the file's format, as last read

    # The tables of the file's format: format 1 kept a chunk's source as text and a
    # table of every span's text key.
    @property
    def _table(self) -> str:
        return self._rows if self._fmt >= 2 else f'"{self.collection}__span_chunks"'

    @property
    def _from(self) -> str:
        """The FROM clause a page of chunk rows (``r``) with their sources is read by."""
        joined = f" JOIN {self._paths} p ON p.id = r.source" if self._fmt >= 2 else ""
        return f"{self._table} r{joined}"

    @property
    def _source(self) -> str:
        return "p.path" if self._fmt >= 2 else "r.source"

    def _chunk_arg(self, chunk: str) -> Any:
        return chunk_key(chunk) if self._fmt >= 2 else chunk

    @property
    def exists(self) -> bool:
        raise NotImplementedError

    def _read(self, build: Callable[[], str], args: Iterable[Any] | Callable[[], Iterable[Any]] = ()) -> Page:
        """The rows of the query *build* writes for the file's format (with *args*, or
        the parameters they give for it), tagged with the format."""
        raise NotImplementedError

    def _width(self) -> int:
        raise NotImplementedError

    def _directions(self) -> np.ndarray | None:
        raise NotImplementedError

    def _spans(self, data: bytes, n: int, first: int | None, fmt: int) -> Spans:
        return Spans(data, n, self._width(), fmt, int(first or 0))

    def _sums(self) -> tuple[int, int]:
        """The spans and the chunks."""
        found = self._read(lambda: f"SELECT coalesce(sum(n), 0), count(*) FROM {self._table}")
        return (int(found[0][0]), int(found[0][1])) if found else (0, 0)

    def count(self) -> int:
        return self._sums()[0] if self.exists else 0

    def count_past(self, cap: int) -> int:
        """The spans as :meth:`count` gives them up to *cap*, and some number past it
        beyond: summed 10,000 chunks at a time until past *cap* (the whole sum reads
        every chunk's row, 0.45 s at 1 GB of journals after each write)."""
        total, after = 0, -1
        while total <= cap and self.exists:
            page = self._read(
                lambda: (
                    f"SELECT coalesce(sum(n), 0), max(id) FROM "
                    f"(SELECT id, n FROM {self._table} WHERE id > ? ORDER BY id LIMIT ?)"
                ),
                (after, COUNT_PAGE),
            )
            if not page or page[0][1] is None:
                break
            total, after = total + int(page[0][0]), int(page[0][1])
        return total

    def counts(self) -> dict[str, int]:
        if not self.exists:
            return {"span_vectors": 0, "span_chunks": 0}
        spans, chunks = self._sums()
        return {"span_vectors": spans, "span_chunks": chunks}

    def scan_rows(self) -> int:
        """The spans at their cost to a search without the in-memory copy (every
        chunk's blob read and scored), in Lite's float32 rows: as the collection's
        float16 rows were counted, so the copy's thresholds keep their meaning."""
        return self.count() * HALF_SCAN_COST

    def chunk_hashes(self) -> set[str]:
        if not self.exists:
            return set()
        return {chunk_hash(r[0]) for r in self._read(lambda: f"SELECT chunk FROM {self._table}")}

    def iter_chunk_rows(self) -> Iterator[tuple[str, str]]:
        for cid in sorted(self.chunk_hashes()):
            yield f"{cid}:0", cid

    def _select(self) -> str:
        return f"SELECT r.chunk, {self._source}, r.start_line, r.end_line, r.n, r.data FROM {self._from}"

    def _pages(self, where: Callable[[], str] = str, args: list[Any] | None = None) -> Iterator[Page]:
        """(chunk, source, start_line, end_line, n, data) rows, a page at a time, by id
        (which a conversion keeps: a reader goes on where it was)."""
        last = -1

        def page() -> str:
            select = self._select().replace("SELECT ", "SELECT r.id, ", 1)
            return f"{select} WHERE r.id > ? {where()} ORDER BY r.id LIMIT {BATCH}"

        while True:
            rows = self._read(page, [last, *(args or [])])
            if not rows:
                return
            last = rows[-1][0]
            yield Page(((chunk_hash(r[1]), *r[2:]) for r in rows), rows.fmt)

    def _by_sources(self, sources: list[str] | None) -> Iterator[Page]:
        if sources is None:
            yield from self._pages()
            return
        wanted = list(dict.fromkeys(sources))
        for i in range(0, len(wanted), BATCH):
            part = wanted[i : i + BATCH]
            yield from self._pages(self._sql("AND {source} IN ({marks})", len(part)), part)

    def _by_chunks(self, chunk_hashes: Iterable[str]) -> Iterator[Page]:
        wanted = list(dict.fromkeys(chunk_hashes))
        for i in range(0, len(wanted), BATCH):
            part = wanted[i : i + BATCH]
            rows = self._read(self._sql("{select} WHERE r.chunk IN ({marks})", len(part)), self._chunk_args(part))
            yield Page(((chunk_hash(r[0]), *r[1:]) for r in rows), rows.fmt)

    def _sql(self, template: str, n: int) -> Callable[[], str]:
        """*template* written for the file's format when asked (``{select}``,
        ``{source}``; ``{marks}``: *n* parameters)."""
        marks = ",".join("?" * n)
        return lambda: template.format(select=self._select(), source=self._source, marks=marks)

    def _chunk_args(self, chunks: list[str]) -> Callable[[], list[Any]]:
        return lambda: [self._chunk_arg(c) for c in chunks]

    def iter_rows(self) -> Iterator[list[dict[str, Any]]]:
        """Every row as the companion collection lists it (row 0 each chunk's), without vectors."""
        if not self.exists:
            return
        for page in self._pages():
            out = []
            for cid, source, start, end, n, data in page:
                p = self._spans(data, n, start, page.fmt)
                out.append(_row(cid, source, 0, start, end, ""))
                out.extend(
                    _row(cid, source, int(i), int(s), int(e), key_bytes(k).hex())
                    for i, s, e, k in zip(p.index, p.starts, p.ends, p.key_ints.tolist(), strict=True)
                )
            yield out

    def iter_codes(
        self, sources: list[str] | None = None
    ) -> Iterator[tuple[list[dict[str, Any]], np.ndarray, np.ndarray]]:
        """The span rows (without vectors) with their codes along the held
        directions and their scales, a page at a time; of these *sources* only when
        given: what the in-memory copy holds, taken as it is."""
        if not self.exists:
            return
        for page in self._by_sources(sources):
            rows: list[dict[str, Any]] = []
            codes, scales = [], []
            for cid, source, start, _end, n, data in page:
                p = self._spans(data, n, start, page.fmt)
                rows.extend(
                    {**_row(cid, source, int(i), int(s), int(e), ""), "_key": key_bytes(k)}
                    for i, s, e, k in zip(p.index, p.starts, p.ends, p.key_ints.tolist(), strict=True)
                )
                codes.append(p.codes)
                scales.append(p.scales)
            if rows:
                yield rows, np.concatenate(codes), np.concatenate(scales)

    def code_pages(self, sources: list[str] | None = None) -> Iterator[CodePage]:
        """What the in-memory copy holds, a page of chunks at a time, as arrays (no
        row objects: 564,000 spans at 50 MB of journals are read in a second or two);
        of these *sources* only when given."""
        if not self.exists:
            return
        width = self._width()
        for page in self._by_sources(sources):
            joined = _joined(page, width)
            if joined is None:
                continue
            rows, counts, a = joined
            yield CodePage(
                chunks=[str(r[0]) for r in rows],
                counts=counts,
                starts=a.starts,
                ends=a.ends,
                index=a.index,
                codes=a.codes,
                scales=a.scales,
            )

    def iter_vectors(self, sources: list[str] | None = None, *, lifted: bool = True) -> Iterator[list[dict[str, Any]]]:
        """The span rows with their vectors: unit vectors of the model's space (or,
        unless *lifted*, in the basis)."""
        from memsearch_fast.store.copy.spans import _dct

        held = self._directions()
        for rows, codes, scales in self.iter_codes(sources):
            m = codes.astype(np.float64) * scales[:, None]
            if held is not None:
                m = m @ held if lifted else m @ _dct(held.shape[0])
            for r, v in zip(rows, m.astype(np.float32), strict=True):
                r["embedding"] = v
            yield rows

    def vectors_for(
        self, text_hashes: list[str], sources: Iterable[str] = (), chunks: Iterable[str] = ()
    ) -> dict[str, list[float]]:
        """Stored vectors of span texts, by text hash, found among the spans of the
        files *sources* and of the chunks *chunks*: an edited chunk's unchanged spans
        are in its own file's old chunks, a moved chunk's in the chunk its vector
        came from (the index run names both). A text stored only elsewhere is
        embedded again: no table of every span's text is kept for it (208 MB at 1 GB
        of journals, docs/store.md)."""
        sources, chunks = list(dict.fromkeys(sources)), list(dict.fromkeys(chunks))
        if not text_hashes or not (sources or chunks) or not self.exists:
            return {}
        by_int: dict[int, list[str]] = {}
        for h in dict.fromkeys(text_hashes):
            by_int.setdefault(_key_int(text_key(h)), []).append(h)
        wanted = np.fromiter(by_int, np.int64, len(by_int))
        distinct = sum(map(len, by_int.values()))
        width = self._width()
        found: dict[str, np.ndarray] = {}
        # The chunks named first (one lookup each), the files' spans only for what is still missing.
        pages = itertools.chain(self._by_chunks(chunks), self._by_sources(sources) if sources else ())
        for page in pages:
            joined = _joined(page, width)
            if joined is None:
                continue
            a = joined[2]
            for j in np.flatnonzero(np.isin(a.key_ints, wanted)).tolist():
                for h in by_int[int(a.key_ints[j])]:
                    if h not in found:
                        found[h] = a.codes[j].astype(np.float64) * float(a.scales[j])
            if len(found) == distinct:
                break
        if not found:
            return {}
        held = self._directions()
        m = np.stack(list(found.values()))
        lifted = (m @ held if held is not None else m).astype(np.float32)
        return {h: v.tolist() for h, v in zip(found, lifted, strict=True)}

    def _scored(self, vector: list[float], pages: Iterable[Page], limit: int | None = None) -> list[dict[str, Any]]:
        """Each chunk of *pages* at its best span for *vector*, best first (the
        *limit* best when given): a page's spans scored in one product."""
        q = np.asarray(vector, dtype=np.float64).reshape(-1)
        q = q / (np.linalg.norm(q) or 1.0)
        held = self._directions()
        qh = (held @ q if held is not None else q).astype(np.float32)
        width = self._width()
        best: list[tuple[float, str, str, int, int, int]] = []
        for page in pages:
            joined = _joined(page, width)
            if joined is None:
                continue
            rows, counts, a = joined
            scores = (a.codes.astype(np.float32) @ qh) * a.scales
            owner = np.repeat(np.arange(len(rows)), counts)
            # Each chunk's best span (the first of its best on a tie): the head of its group
            # once the spans are ordered by chunk, then score, then position.
            order = np.lexsort((np.arange(len(scores)), -scores, owner))
            first = order[np.concatenate([[0], np.cumsum(counts)[:-1]])]
            index, start, end = a.index[first], a.starts[first], a.ends[first]
            best.extend(
                (float(scores[j]), str(r[0]), str(r[1]), int(i), int(s), int(e))
                for r, j, i, s, e in zip(rows, first, index, start, end, strict=True)
            )
        best.sort(key=lambda h: -h[0])
        return [
            {
                "span_id": f"{cid}:{index}",
                "chunk_hash": cid,
                "source": source,
                "start_line": start,
                "end_line": end,
                "distance": score,
            }
            for score, cid, source, index, start, end in (best if limit is None else best[:limit])
        ]

    def search(self, vector: list[float], limit: int, source_prefix: str | None) -> list[dict[str, Any]]:
        """The *limit* chunks whose best span is nearest to *vector*, best first."""
        if limit <= 0 or not self.exists:
            return []
        pages = self._pages()
        if source_prefix:
            pages = (Page((r for r in page if str(r[1]).startswith(source_prefix)), page.fmt) for page in pages)
        return self._scored(vector, pages, limit)

    def best_of(self, vector: list[float], chunk_hashes: list[str]) -> dict[str, dict[str, Any]]:
        if not chunk_hashes or not self.exists:
            return {}
        return {h["chunk_hash"]: h for h in self._scored(vector, self._by_chunks(chunk_hashes))}


def _row(cid: str, source: str, index: int, start: int, end: int, text_hash: str) -> dict[str, Any]:
    return {
        "span_id": f"{cid}:{index}",
        "chunk_hash": cid,
        "source": source,
        "text_hash": text_hash,
        "start_line": start,
        "end_line": end,
    }
