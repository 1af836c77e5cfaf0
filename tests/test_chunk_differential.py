"""Differential tests: our chunker against memsearch 0.4.23's, field by field.

Generated markdown has no code fences, where the two are specified to agree
exactly; the fence rule is pinned separately in test_chunk_rules.py.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import memsearch_fast as ms
from memsearch_fast._core import CHUNK_AMPLIFY, CHUNK_SLACK_CHUNKS
from tests.helpers import reference

ref_chunker = reference.module("memsearch.chunker")

FIELDS = ("content", "source", "heading", "heading_level", "start_line", "end_line", "content_hash")
FENCE = re.compile(r"^ {0,3}(```|~~~)", re.MULTILINE)

# Characters that stress the Python-compatibility rules: Unicode whitespace
# that str.isspace() accepts (and Rust's trim would not), splitlines breaks,
# sentence punctuation, CJK, emoji, ellipses.
SPECIAL = list(" \t\x0b\x0c\r\x1c\x1d\x1e\x1f\x85\xa0\u3000\u2028\u2029.!?;…。！？；#-*>`~<!->")
WORDS = [
    "memory",
    "index",
    "Milvus",
    "user@example.com",
    "v1.2.3",
    "path/to/file.py",
    "http://foo.bar",
    "数据库",
    "迁移完成",
    "テスト",
    "검색",
    "🚀",
    "👩‍💻",
    "e.g.",
    "Dr.",
    "end.",
    "why?",
    "yes!",
    "a;b",
]


def _texts() -> st.SearchStrategy[str]:
    word = st.one_of(
        st.sampled_from(WORDS),
        st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\n"), max_size=12),
        st.sampled_from(SPECIAL),
    )
    plain = st.lists(word, max_size=40).map(" ".join)
    long_line = st.lists(st.sampled_from([*WORDS, "sentence.", "。", "…", "……"]), min_size=50, max_size=400).map(
        lambda ws: "".join(w + (" " if i % 3 else "") for i, w in enumerate(ws))
    )
    heading = st.tuples(st.integers(1, 7), st.sampled_from(["", " ", "  ", "\t"]), plain).map(
        lambda t: "#" * t[0] + t[1] + t[2]
    )
    comment = plain.map(lambda s: f"<!-- {s} -->")
    multiline_comment = st.tuples(plain, plain).map(lambda t: f"<!-- {t[0]}\n{t[1]} -->")
    line = st.one_of(
        plain, plain, heading, heading, st.just(""), st.just(""), st.just("   "), long_line, comment, multiline_comment
    )
    return st.lists(line, max_size=60).map("\n".join)


def _as_tuples(chunks):
    return [tuple(getattr(c, f) for f in FIELDS) for c in chunks]


def over_the_bound(text: str, chunks: list, max_chunk_size: int) -> bool:
    """Whether *chunks* hold more bytes than ours allow a document (rust/chunker.rs, AMPLIFY)."""
    held = sum(len(c.content.encode("utf-8")) for c in chunks)
    return held > len(text.encode("utf-8")) * CHUNK_AMPLIFY + max_chunk_size * CHUNK_SLACK_CHUNKS


def assert_same(text: str, *, max_chunk_size: int, overlap_lines: int, source: str = "mem/a.md") -> None:
    expected = ref_chunker.chunk_markdown(text, source, max_chunk_size=max_chunk_size, overlap_lines=overlap_lines)
    if over_the_bound(text, expected, max_chunk_size):  # ours: chunked again without overlap
        expected = ref_chunker.chunk_markdown(text, source, max_chunk_size=max_chunk_size, overlap_lines=0)
    actual = ms.chunk_markdown(text, source, max_chunk_size=max_chunk_size, overlap_lines=overlap_lines)
    assert _as_tuples(actual) == _as_tuples(expected)
    for c in actual:
        assert ms.compute_chunk_id(
            c.source, c.start_line, c.end_line, c.content_hash, "m"
        ) == ref_chunker.compute_chunk_id(c.source, c.start_line, c.end_line, c.content_hash, "m")
    assert ms.clean_content_for_embedding(text) == ref_chunker.clean_content_for_embedding(text)


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(text=_texts(), max_chunk_size=st.sampled_from([1, 7, 40, 120, 400, 1500]), overlap=st.integers(-1, 4))
@pytest.mark.slow(reason="runs memsearch 0.4.23's chunker in its own environment on generated markdown")
def test_generated_markdown_matches_reference(text: str, max_chunk_size: int, overlap: int) -> None:
    if FENCE.search(text):
        return
    assert_same(text, max_chunk_size=max_chunk_size, overlap_lines=overlap)


@settings(max_examples=300, deadline=None)
@given(text=st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=400), size=st.integers(1, 60))
def test_arbitrary_text_matches_reference(text: str, size: int) -> None:
    if FENCE.search(text):
        return
    assert_same(text, max_chunk_size=size, overlap_lines=2)


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=200))
def test_clean_content_matches_reference(text: str) -> None:
    assert ms.clean_content_for_embedding(text) == ref_chunker.clean_content_for_embedding(text)


@given(
    source=st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=40),
    start=st.integers(0, 10**6),
    end=st.integers(0, 10**6),
    model=st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=30),
    content=st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=80),
)
def test_chunk_id_matches_reference(source: str, start: int, end: int, model: str, content: str) -> None:
    from memsearch_fast.index.chunk import content_hash

    h = content_hash(content)
    assert h == ref_chunker.Chunk(content, "", "", 0, 1, 1).content_hash
    assert ms.compute_chunk_id(source, start, end, h, model) == ref_chunker.compute_chunk_id(
        source, start, end, h, model
    )


def _realistic_files(sample_dir):
    files = sorted(p for p in sample_dir.rglob("*.md"))
    assert files, "bundled sample is missing"
    return files


@pytest.mark.parametrize("max_chunk_size", [80, 300, 1500])
def test_sample_files_match_reference(sample_dir, max_chunk_size: int) -> None:
    for path in _realistic_files(sample_dir):
        text = path.read_text(encoding="utf-8")
        assert not FENCE.search(text)
        assert_same(text, max_chunk_size=max_chunk_size, overlap_lines=2, source=str(path))


def test_generated_corpus_matches_reference(tmp_path) -> None:
    from tests.helpers.corpus import write_corpus

    write_corpus(tmp_path, total_bytes=600_000, seed=7, fences=False)
    files = sorted(tmp_path.rglob("*.md"))
    assert len(files) > 10
    for path in files:
        text = path.read_text(encoding="utf-8")
        assert_same(text, max_chunk_size=1500, overlap_lines=2, source=str(path))


def test_an_overlap_longer_than_its_windows_is_bounded_where_the_reference_is_not() -> None:
    """memsearch 0.4.23 with 50-character chunks and 1,000 lines of overlap makes
    about N²/4 chunks of N short lines (each window one line longer than the
    last); ours holds the document within the bound, without overlap."""
    text = "".join(f"- {i:03d} deploy note\n" for i in range(300))
    theirs = ref_chunker.chunk_markdown(text, "j.md", max_chunk_size=50, overlap_lines=1000)
    assert over_the_bound(text, theirs, 50) and len(theirs) > 10_000
    ours = ms.chunk_markdown(text, "j.md", max_chunk_size=50, overlap_lines=1000)
    assert not over_the_bound(text, ours, 50)
    assert _as_tuples(ours) == _as_tuples(ref_chunker.chunk_markdown(text, "j.md", max_chunk_size=50, overlap_lines=0))
