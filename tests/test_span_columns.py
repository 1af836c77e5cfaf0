"""The columns of a span write (:mod:`memsearch_fast.store.spans.columns`): chunks handed
over with their spans pack exactly as the rows of a span collection do."""

from __future__ import annotations

import numpy as np
import pytest

from memsearch_fast.store.spans.collection import span_row
from memsearch_fast.store.spans.columns import ChunkSpans, Columns, SpanBlock, key_ints
from memsearch_fast.store.spans.layout import Spans, pack
from memsearch_fast.store.spans.reads import key_bytes, text_key


def encode(vectors: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    m = np.asarray(vectors, np.float32).reshape(len(vectors), -1)
    scales = (np.abs(m).max(axis=1) / 31).astype(np.float16).astype(np.float32)
    return np.clip(np.round(m / scales[:, None]), -31, 31).astype(np.int8), scales


def chunks() -> list[ChunkSpans]:
    rng = np.random.default_rng(7)
    out = []
    for c in range(5):
        n = 1 + c
        lines = np.arange(10 * c + 1, 10 * c + 1 + n, dtype=np.int32)
        block = SpanBlock(
            lines, lines + 1, [f"{c:08x}{i:08x}" for i in range(1, n + 1)], rng.standard_normal((n, 8)), first=1
        )
        out.append(ChunkSpans(f"chunk{c}", f"/notes/{c}.md", 10 * c, 10 * c + 9, rng.standard_normal(8), block))
    return out


def test_chunks_pack_as_their_rows_do() -> None:
    given = chunks()
    rows = [span_row(c.chunk_hash, c.source, *s) for c in given for s in c.spans.rows()]
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
    spans = given[2].spans
    assert packed.starts.tolist() == spans.starts.tolist()
    assert packed.ends.tolist() == spans.ends.tolist()
    codes, scales = encode(list(spans.vectors))
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


def test_spans_without_their_vectors_are_refused_not_skipped() -> None:
    given = chunks()
    given[1] = given[1]._replace(spans=SpanBlock(given[1].spans.starts, given[1].spans.ends, given[1].spans.hashes))
    # Skipped, the next chunks' vectors would take its spans' places.
    with pytest.raises(ValueError, match="without their vectors"):
        Columns.from_chunks(given, encode)
    empty = given[0]._replace(spans=SpanBlock(np.zeros(0, np.int32), np.zeros(0, np.int32), []))
    assert len(Columns.from_chunks([empty, given[2]], encode)[0].codes) == len(given[2].spans)
