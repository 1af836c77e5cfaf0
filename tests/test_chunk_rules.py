"""Behaviour that is ours alone: the fence rule, CRLF files, invalid UTF-8,
and the streaming contract of chunk_files."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import memsearch_fast as ms
from memsearch_fast.index.chunk import content_hash


def test_hash_line_inside_backtick_fence_is_not_a_heading() -> None:
    text = "# Setup\nRun this:\n```bash\n# install deps\npip install x\n```\nDone.\n## Next\nmore text"
    chunks = ms.chunk_markdown(text, "a.md")
    assert [(c.heading, c.start_line, c.end_line) for c in chunks] == [("Setup", 1, 7), ("Next", 8, 9)]
    assert "# install deps" in chunks[0].content


def test_tilde_fence_needs_matching_close() -> None:
    # ``` does not close a ~~~ fence, and a shorter ~~ run does not either.
    text = "# A\nintro\n~~~~\n# not heading\n```\n~~~\n# still code\n~~~~\n# B\nbody"
    chunks = ms.chunk_markdown(text)
    assert [c.heading for c in chunks] == ["A", "B"]
    assert chunks[1].start_line == 9


def test_unclosed_fence_runs_to_end_of_document() -> None:
    text = "# A\ntext\n```\n# comment\n# another"
    assert [c.heading for c in ms.chunk_markdown(text)] == ["A"]


def test_indented_four_spaces_is_not_a_fence() -> None:
    text = "# A\ntext\n    ```\n# B\nbody"
    assert [c.heading for c in ms.chunk_markdown(text)] == ["A", "B"]


def test_backtick_fence_info_string_may_not_contain_backticks() -> None:
    # "```a`b" is inline code, not a fence opener, so "# B" stays a heading.
    text = "# A\n```a`b\n# B\nbody"
    assert [c.heading for c in ms.chunk_markdown(text)] == ["A", "B"]


def test_crlf_file_keeps_headings_and_line_numbers() -> None:
    lf = "# Title\nfirst line\n\n## Part\nsecond line\n"
    crlf = lf.replace("\n", "\r\n")
    a = ms.chunk_markdown(lf, "x.md")
    b = ms.chunk_markdown(crlf, "x.md")
    assert [(c.heading, c.heading_level, c.start_line, c.end_line) for c in b] == [
        (c.heading, c.heading_level, c.start_line, c.end_line) for c in a
    ]
    assert all("\r" not in c.heading for c in b)
    # Content keeps the file's bytes (so ids match other tools reading it).
    assert b[0].content == "# Title\r\nfirst line"


def test_invalid_utf8_is_replaced_and_flagged(tmp_path) -> None:
    bad = tmp_path / "bad.md"
    bad.write_bytes(b"# Bad\nvalid text \xff\xfe more \xc3( text\n")
    good = tmp_path / "good.md"
    good.write_text("# Good\nfine text\n", encoding="utf-8")
    results = {fc.path: fc for batch in ms.chunk_files([bad, good], workers=2) for fc in batch}
    assert results[str(bad)].invalid_utf8 is True
    assert results[str(good)].invalid_utf8 is False
    content = results[str(bad)].chunks[0].content
    assert content == b"# Bad\nvalid text \xff\xfe more \xc3( text".decode("utf-8", errors="replace")
    assert "\ufffd" in content


def test_chunk_files_equals_chunk_markdown_per_file(sample_dir) -> None:
    files = sorted(sample_dir.rglob("*.md"))
    seen = []
    for batch in ms.chunk_files(files, workers=2, batch_chunks=3, max_chunk_size=200):
        assert batch
        for fc in batch:
            assert fc.error is None
            expected = ms.chunk_markdown(Path(fc.path).read_text(encoding="utf-8"), fc.path, max_chunk_size=200)
            assert fc.chunks == expected
            assert fc.size == os.path.getsize(fc.path)
            assert len(fc.fingerprint) == 16
            seen.append(fc.path)
    assert seen == [str(f) for f in files]


def test_fingerprint_changes_with_content(tmp_path) -> None:
    f = tmp_path / "a.md"
    f.write_text("# A\nbody one\n")
    (first,) = next(iter(ms.chunk_files([f])))
    f.write_text("# A\nbody two\n")
    (second,) = next(iter(ms.chunk_files([f])))
    assert first.fingerprint != second.fingerprint


def test_file_removed_between_scan_and_read_is_reported(tmp_path) -> None:
    keep = tmp_path / "keep.md"
    keep.write_text("# Keep\nsome text\n")
    gone = tmp_path / "gone.md"
    gone.write_text("# Gone\nsome text\n")
    files = ms.scan_paths([tmp_path])
    gone.unlink()
    results = [fc for batch in ms.chunk_files(files) for fc in batch]
    by_path = {fc.path: fc for fc in results}
    assert by_path[str(gone)].error and "No such file" in by_path[str(gone)].error
    assert by_path[str(gone)].chunks == []
    assert by_path[str(keep)].error is None and len(by_path[str(keep)].chunks) == 1


def test_batches_are_bounded_and_cover_every_file(tmp_path) -> None:
    for i in range(300):
        (tmp_path / f"f{i:03d}.md").write_text(f"# File {i}\n" + "\n\n".join(f"para {j} of {i}" for j in range(5)))
    files = ms.scan_paths([tmp_path])
    batches = list(ms.chunk_files(files, workers=2, batch_chunks=50, max_chunk_size=15))
    assert sum(len(b) for b in batches) == 300
    per_file = len(batches[0][0].chunks)
    sizes = [sum(len(fc.chunks) for fc in b) for b in batches]
    # Whole files only: a batch stops at the first file that reaches the bound.
    assert all(50 <= s < 50 + per_file for s in sizes[:-1])


def test_abandoned_stream_does_not_hang(tmp_path) -> None:
    """A stream dropped after its first batch stops its reader threads (none is left blocked on a full queue)."""
    import gc
    import os
    import time

    def threads() -> int:
        return len(os.listdir("/proc/self/task"))

    for i in range(200):
        (tmp_path / f"f{i}.md").write_text(f"# F{i}\ntext text\n")
    before = threads()
    stream = ms.chunk_files(ms.scan_paths([tmp_path]), batch_chunks=1, workers=2)
    next(stream)
    assert threads() > before  # its threads run, blocked on the bounded queue
    del stream  # the producer threads must notice and stop
    gc.collect()
    deadline = time.monotonic() + 10
    while threads() > before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert threads() <= before


@pytest.mark.parametrize("size", [0, -5])
def test_max_chunk_size_must_be_positive(size: int) -> None:
    with pytest.raises(ValueError, match="max_chunk_size"):
        ms.chunk_markdown("# A\ntext", max_chunk_size=size)


def test_empty_and_whitespace_documents() -> None:
    assert ms.chunk_markdown("") == []
    assert ms.chunk_markdown("\n\n  \t\n") == []
    assert ms.chunk_markdown("# Only a heading\n") == []


def test_python_whitespace_table_matches_str_isspace() -> None:
    # The Rust side re-implements str.isspace(); a one-char document whose
    # only character is whitespace must produce no chunk, anything else one.
    for cp in range(0x3001):
        ch = chr(cp)
        if 0xD800 <= cp <= 0xDFFF or ch in "<#`~":
            continue
        text = f"{ch}x{ch}"
        (chunk,) = ms.chunk_markdown(text + "y")
        assert chunk.content == (text + "y").strip(), hex(cp)


def test_content_hash_and_id_shape() -> None:
    (c,) = ms.chunk_markdown("# T\nhello there", "/a/b.md")
    assert c.content_hash == content_hash(c.content)
    cid = c.chunk_id("all-MiniLM-L6-v2")
    assert cid == ms.compute_chunk_id("/a/b.md", 1, 2, c.content_hash, "all-MiniLM-L6-v2")
    assert len(cid) == 16 and int(cid, 16) >= 0


def test_non_utf8_file_name_fails_that_file_only(tmp_path) -> None:
    raw = os.fsencode(tmp_path) + b"/caf\xe9.md"
    with open(raw, "wb") as fh:
        fh.write(b"# Cafe\nsome text\n")
    ok = tmp_path / "ok.md"
    ok.write_text("# Ok\nfine text\n")
    results = [fc for batch in ms.chunk_files([os.fsdecode(raw), ok]) for fc in batch]
    assert results[0].error == "file name is not valid UTF-8" and results[0].chunks == []
    assert results[1].error is None and results[1].chunks


def test_files_arrive_in_input_order_whatever_their_size(tmp_path) -> None:
    # Large and tiny files alternate, so workers finish out of order.
    files = []
    for i in range(120):
        body = ("word " * 40 + "\n\n") * (400 if i % 7 == 0 else 1)
        path = tmp_path / f"f{i:03d}.md"
        path.write_text(f"# File {i}\n{body}")
        files.append(str(path))
    files.reverse()  # not the scan's sorted order: the input order is kept
    got = [fc.path for batch in ms.chunk_files(files, workers=2, batch_chunks=7) for fc in batch]
    assert got == files
