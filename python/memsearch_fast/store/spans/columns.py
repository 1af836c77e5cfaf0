"""The spans of one write to a span file, a column each: built from rows (a span
collection's shape, one dict a span) or from the chunks an index run hands over
with their spans (:class:`ChunkSpans`: one tuple a chunk; a 50 MB run writes half
a million spans, and the dicts cost it seconds)."""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, Protocol

import numpy as np

from memsearch_fast.store.spans.layout import pack_chunks
from memsearch_fast.store.spans.reads import KEY, text_key

#: Codes (within ±31, a row a span) and scales of vectors (the span file's ``_encode``).
Encode = Callable[[list[Any]], tuple[np.ndarray, np.ndarray]]


def key_ints(text_hashes: Sequence[str]) -> np.ndarray:
    """The index keys (:func:`text_key` as little-endian int64) of span texts, at once."""
    n = len(text_hashes)
    if n and set(map(len, text_hashes)) == {2 * KEY}:  # the usual: content hashes, one call for all
        with contextlib.suppress(ValueError):
            return np.frombuffer(bytes.fromhex("".join(text_hashes)), "<i8").reshape(n)
    return np.frombuffer(b"".join(text_key(h) for h in text_hashes), "<i8").reshape(n)


class SpanLike(Protocol):
    """One span of a chunk with its vector (``memsearch_fast.index.embed.SpanVector``)."""

    @property
    def index(self) -> int: ...
    @property
    def start_line(self) -> int: ...
    @property
    def end_line(self) -> int: ...
    @property
    def text_hash(self) -> str: ...
    @property
    def vector(self) -> Any: ...


class ChunkSpans(NamedTuple):
    """A chunk and its spans as an index run hands them to a span store: one tuple a
    chunk, where rows would be a dict a span (half a million at 50 MB of journals)."""

    chunk_hash: str
    source: str
    start_line: int
    end_line: int
    vector: Any  # the chunk's own, row 0 of a span collection
    spans: Sequence[SpanLike]


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
        flat = [s for c in chunks for s in c.spans]
        n = len(flat)
        columns = cls(
            np.fromiter((s.index for s in flat), np.int32, n),
            np.fromiter((s.start_line for s in flat), np.int32, n),
            np.fromiter((s.end_line for s in flat), np.int32, n),
            key_ints([s.text_hash for s in flat]),
            *encode([s.vector for s in flat]),
        )
        bounds = np.cumsum([0, *(len(c.spans) for c in chunks)]).tolist()
        return columns, [np.arange(a, b) for a, b in itertools.pairwise(bounds)]
