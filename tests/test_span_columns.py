"""The columns of a span write (:mod:`memsearch_fast.store.spans.columns`): chunks handed
over with their spans pack exactly as the rows of a span collection do."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from memsearch_fast.store.spans.collection import span_row
from memsearch_fast.store.spans.columns import ChunkSpans, Columns, key_ints
from memsearch_fast.store.spans.layout import Spans, pack
from memsearch_fast.store.spans.reads import key_bytes, text_key


@dataclass
class Span:
    index: int
    start_line: int
    end_line: int
    text_hash: str
    vector: np.ndarray


def encode(vectors: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    m = np.asarray(vectors, np.float32).reshape(len(vectors), -1)
    scales = (np.abs(m).max(axis=1) / 31).astype(np.float16).astype(np.float32)
    return np.clip(np.round(m / scales[:, None]), -31, 31).astype(np.int8), scales


def chunks() -> list[ChunkSpans]:
    rng = np.random.default_rng(7)
    out = []
    for c in range(5):
        # spans handed over out of order in one chunk: stored in span order all the same
        order = [3, 1, 2] if c == 2 else list(range(1, 2 + c))
        spans = [Span(i, 10 * c + i, 10 * c + i + 1, f"{c:08x}{i:08x}", rng.standard_normal(8)) for i in order]
        out.append(ChunkSpans(f"chunk{c}", f"/notes/{c}.md", 10 * c, 10 * c + 9, rng.standard_normal(8), spans))
    return out


def test_chunks_pack_as_their_rows_do() -> None:
    given = chunks()
    rows = [
        span_row(c.chunk_hash, c.source, s.index, s.start_line, s.end_line, s.text_hash, s.vector)
        for c in given
        for s in c.spans
    ]
    by_rows = Columns.from_rows(rows, encode)
    by_chunks, picks = Columns.from_chunks(given, encode)
    for a, b in zip(by_rows, by_chunks, strict=True):
        assert np.array_equal(a, b)
    assert [len(p) for p in picks] == [len(c.spans) for c in given]
    first = given[2].start_line
    packed = Spans(by_chunks.take_each([picks[2]], [first])[0], 3, 8, 2, first)
    assert packed.index.tolist() == [1, 2, 3]  # span order
    assert [key_bytes(k).hex() for k in packed.key_ints.tolist()] == [f"00000002{i:08x}" for i in (1, 2, 3)]
    # lines and codes come back as they went in: the lines counted from the chunk's first
    spans = sorted(given[2].spans, key=lambda s: s.index)
    assert packed.starts.tolist() == [s.start_line for s in spans]
    assert packed.ends.tolist() == [s.end_line for s in spans]
    codes, scales = encode([s.vector for s in spans])
    assert np.array_equal(packed.codes, codes) and np.array_equal(packed.scales, scales)


def test_chunks_packed_in_one_pass_are_the_bytes_of_one_pack_a_chunk() -> None:
    rng = np.random.default_rng(3)
    n = 40
    cols = Columns(
        rng.integers(1, 60, n).astype(np.int32),
        rng.integers(100, 200, n).astype(np.int32),
        rng.integers(200, 300, n).astype(np.int32),
        rng.integers(-(2**62), 2**62, n),
        rng.integers(-31, 32, (n, 10)).astype(np.int8),
        rng.random(n).astype(np.float32),
    )
    # picks out of span order, one empty, and a chunk whose first line is past its spans' (clipped as pack clips)
    picks = [rng.permutation(n)[:7], np.zeros(0, np.int64), np.arange(5, 12), np.array([3, 0, 39])]
    firsts = [90, 10, 150, 250]
    want = []
    c = cols
    for pick, first in zip(picks, firsts, strict=True):
        at = pick[np.argsort(cols.span_index[pick], kind="stable")]
        want.append(pack(c.span_index[at], c.starts[at], c.ends[at], c.keys[at], c.codes[at], c.scales[at], first))
    assert cols.take_each(picks, firsts) == want
    assert Columns(*(np.zeros((0, *a.shape[1:]), a.dtype) for a in cols)).take_each([[], []], [0, 0]) == [b"", b""]


def test_keys_of_other_strings_are_hashed_as_one_at_a_time() -> None:
    hashes = ["0123456789abcdef", "not a content hash", "fedcba9876543210"]
    want = np.frombuffer(b"".join(text_key(h) for h in hashes), "<i8")
    assert np.array_equal(key_ints(hashes), want)
    # sixteen characters that are no hex: hashed, not decoded
    assert np.array_equal(key_ints(["zz23456789abcdef"]), np.frombuffer(text_key("zz23456789abcdef"), "<i8"))
    assert key_ints([]).shape == (0,)
