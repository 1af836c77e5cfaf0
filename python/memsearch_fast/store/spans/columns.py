"""The spans of one write to a span file, a column each: built from rows (a span
collection's shape, one dict a span) or from the chunks an index run hands over
with their spans (:class:`ChunkSpans`: one tuple a chunk; a 50 MB run writes half
a million spans, and the dicts cost it seconds)."""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from memsearch_fast.store.spans.layout import pack_chunks
from memsearch_fast.store.spans.reads import KEY, text_key

#: Codes (within ±31, a row a span) and scales of vectors (the span file's ``_encode``).
Encode = Callable[[Any], tuple[np.ndarray, np.ndarray]]


def key_ints(text_hashes: Sequence[str]) -> np.ndarray:
    """The index keys (:func:`text_key` as little-endian int64) of span texts, at once."""
    n = len(text_hashes)
    if n and set(map(len, text_hashes)) == {2 * KEY}:  # the usual: content hashes, one call for all
        with contextlib.suppress(ValueError):
            return np.frombuffer(bytes.fromhex("".join(text_hashes)), "<i8").reshape(n)
    return np.frombuffer(b"".join(text_key(h) for h in text_hashes), "<i8").reshape(n)


@dataclass(slots=True, eq=False)
class SpanBlock:
    """A chunk's spans a column each, in span order (indexes *first* on): their
    lines, text hashes and vectors, one float32 row a span. An index run fills
    *vectors* as its batches come back; an object a span cost it more than
    the cutting did (half a million spans at 50 MB of journals)."""

    starts: np.ndarray
    ends: np.ndarray
    hashes: list[str]
    vectors: np.ndarray | None = None
    first: int = 1

    def __len__(self) -> int:
        return len(self.hashes)

    def rows(self) -> Iterator[tuple[int, int, int, str, Any]]:
        """``(index, start_line, end_line, text_hash, vector)`` of each span, for a
        store that takes a row a span (a span collection)."""
        vectors: Any = self.vectors if self.vectors is not None else [None] * len(self)
        lines = zip(self.starts.tolist(), self.ends.tolist(), strict=True)
        for i, ((a, b), h, v) in enumerate(zip(lines, self.hashes, vectors, strict=True)):
            yield self.first + i, a, b, h, v


class ChunkSpans(NamedTuple):
    """A chunk and its spans as an index run hands them to a span store: one tuple a
    chunk, where rows would be a dict a span (half a million at 50 MB of journals)."""

    chunk_hash: str
    source: str
    start_line: int
    end_line: int
    vector: Any  # the chunk's own, row 0 of a span collection
    spans: SpanBlock


def span_vectors(chunks: Sequence[ChunkSpans]) -> np.ndarray:
    """The vectors of the spans of *chunks*, a row each, in order (a chunk whose
    spans lack them is refused: the rows would fall out of line with the spans)."""
    parts: list[np.ndarray] = []
    for c in chunks:
        if len(c.spans):
            if c.spans.vectors is None:
                raise ValueError("a chunk's spans are handed over without their vectors")
            parts.append(c.spans.vectors)
    return np.concatenate(parts) if parts else np.zeros((0, 0), np.float32)


class Columns(NamedTuple):
    """Spans a column each; *codes* and *scales* are the encoder's."""

    span_index: np.ndarray
    starts: np.ndarray
    ends: np.ndarray
    keys: np.ndarray
    codes: np.ndarray
    scales: np.ndarray

    @classmethod
    def from_rows(cls, rows: list[dict[str, Any]], encode: Encode) -> Columns:
        n = len(rows)
        return cls(
            np.fromiter((int(str(r["span_id"]).rpartition(":")[2]) for r in rows), np.int32, n),
            np.fromiter((int(r["start_line"]) for r in rows), np.int32, n),
            np.fromiter((int(r["end_line"]) for r in rows), np.int32, n),
            np.frombuffer(b"".join(r.get("_key") or text_key(str(r["text_hash"])) for r in rows), "<i8").reshape(n),
            *encode([r["embedding"] for r in rows]),
        )

    def take_each(self, picks: Sequence[Any], firsts: Sequence[int]) -> list[bytes]:
        """The spans at each of *picks*, in span order, packed as the row of a chunk
        whose first line is the matching one of *firsts* holds them."""
        counts = [len(p) for p in picks]
        at = np.concatenate([np.asarray(p, np.int64) for p in picks]) if sum(counts) else np.zeros(0, np.int64)
        owner = np.repeat(np.arange(len(picks)), counts)
        at = at[np.lexsort((self.span_index[at], owner))]  # span order within each chunk, chunks as given
        return pack_chunks(
            self.span_index[at],
            self.starts[at],
            self.ends[at],
            self.keys[at],
            self.codes[at],
            self.scales[at],
            firsts,
            counts,
        )

    @classmethod
    def from_chunks(cls, chunks: Sequence[ChunkSpans], encode: Encode) -> tuple[Columns, list[np.ndarray]]:
        """The spans of *chunks*, and where each chunk's lie."""
        blocks = [c.spans for c in chunks]
        counts = np.fromiter(map(len, blocks), np.int64, len(blocks))
        bounds = np.concatenate([[0], np.cumsum(counts)])
        n = int(bounds[-1])
        firsts = np.fromiter((b.first for b in blocks), np.int64, len(blocks))
        columns = cls(
            (np.arange(n) - np.repeat(bounds[:-1] - firsts, counts)).astype(np.int32),
            np.concatenate([np.zeros(0, np.int32), *(b.starts for b in blocks)]).astype(np.int32, copy=False),
            np.concatenate([np.zeros(0, np.int32), *(b.ends for b in blocks)]).astype(np.int32, copy=False),
            key_ints(list(itertools.chain.from_iterable(b.hashes for b in blocks))),
            *encode(span_vectors(chunks)),
        )
        return columns, [np.arange(a, b) for a, b in itertools.pairwise(bounds.tolist())]
