"""Scanner rules, checked on real directory trees (and against the reference
scanner where its behaviour is defined)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import memsearch_fast as ms
from memsearch_fast.index.scan import ScanError
from tests.helpers import reference

ref_scanner = reference.module("memsearch.scanner")


def touch(path: Path, text: str = "# T\nbody text\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def names(files, root: Path) -> list[str]:
    return [os.path.relpath(f.path, root) for f in files]


def same_as_reference(paths, **kw) -> list:
    ours = ms.scan_paths(paths, **kw)
    theirs = ref_scanner.scan_paths(list(paths), **kw)
    assert [(f.path, f.size) for f in ours] == [(str(f.path), f.size) for f in theirs]
    assert [f.mtime for f in ours] == pytest.approx([f.mtime for f in theirs])
    return ours


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    touch(root / "a.md")
    touch(root / "B.MD")
    touch(root / "c.markdown")
    touch(root / "notes.txt")
    touch(root / "sub" / "d.md")
    touch(root / "sub" / "deeper" / "e.md")
    touch(root / ".hidden.md")
    touch(root / ".git" / "x.md")
    touch(root / "sub-file.md")
    touch(root / "build" / "out.md")
    return root


def test_walks_recursively_and_sorts_by_path_components(tree: Path) -> None:
    files = same_as_reference([tree])
    assert names(files, tree) == [
        "B.MD",
        "a.md",
        "build/out.md",
        "c.markdown",
        "sub/d.md",
        "sub/deeper/e.md",
        "sub-file.md",
    ]
    assert all(os.path.isabs(f.path) for f in files)


def test_hidden_entries_can_be_included(tree: Path) -> None:
    files = same_as_reference([tree], ignore_hidden=False)
    assert ".hidden.md" in names(files, tree) and ".git/x.md" in names(files, tree)


def test_hidden_markdown_skipped_is_counted_unless_named_as_a_root(tree: Path) -> None:
    """A run says what the hidden rule left out (``.git`` aside), and a hidden
    folder named as a root is indexed, not counted as skipped."""
    from memsearch_fast.index.scan import scan

    touch(tree / ".github" / "CONTRIBUTING.md")
    touch(tree / ".github" / "workflows" / "notes.md")
    touch(tree / ".github" / "ci.yml")
    touch(tree / "sub" / ".cache" / "blob.bin")
    real = os.path.realpath(tree)
    found = scan([tree])
    assert found.hidden == {os.path.join(real, ".github"): 2, os.path.join(real, ".hidden.md"): 1}
    both = scan([tree, tree / ".github"])
    assert both.hidden == {os.path.join(real, ".hidden.md"): 1}
    assert {"CONTRIBUTING.md", "notes.md"} <= {os.path.basename(f.path) for f in both.files}
    assert scan([tree], exclude=[".github/"]).hidden == {os.path.join(real, ".hidden.md"): 1}


def test_explicit_file_is_always_eligible(tree: Path) -> None:
    files = same_as_reference([tree / ".hidden.md", tree / "notes.txt"], exclude=["*.md"])
    assert names(files, tree) == [".hidden.md"]


def test_exclude_patterns_are_relative_to_each_root(tree: Path) -> None:
    files = same_as_reference([tree], exclude=["build/", "/a.md", "deeper"])
    assert names(files, tree) == ["B.MD", "c.markdown", "sub/d.md", "sub-file.md"]


def test_exclude_negation(tree: Path) -> None:
    files = same_as_reference([tree], exclude=["*.md", "!sub/d.md"])
    assert names(files, tree) == ["B.MD", "c.markdown", "sub/d.md"]


def test_ignore_files_are_discovered_per_directory(tree: Path) -> None:
    (tree / ".gitignore").write_text("build/\n*.markdown\n")
    (tree / "sub" / ".gitignore").write_text("d.md\n")
    (tree / "sub" / "deeper" / ".gitignore").write_text("!*.md\n")
    files = same_as_reference([tree], ignore_files=[".gitignore"])
    assert names(files, tree) == ["B.MD", "a.md", "sub/deeper/e.md", "sub-file.md"]


def test_ignore_files_above_the_root_are_not_read(tree: Path) -> None:
    (tree / ".gitignore").write_text("*.md\n")
    files = same_as_reference([tree / "sub"], ignore_files=[".gitignore"])
    assert names(files, tree) == ["sub/d.md", "sub/deeper/e.md"]


def test_ignore_file_names_must_be_bare(tree: Path) -> None:
    for bad in ["../.gitignore", "a/b", "", ".."]:
        with pytest.raises(ValueError, match="ignore file"):
            ms.scan_paths([tree], ignore_files=[bad])


def test_overlapping_roots_are_deduplicated(tree: Path) -> None:
    files = same_as_reference([tree, tree / "sub", tree / "a.md"])
    assert len(files) == len({f.path for f in files}) == 7


def test_symlinked_file_is_deduplicated_by_resolved_path(tree: Path) -> None:
    (tree / "sub" / "link.md").symlink_to(tree / "a.md")
    files = ms.scan_paths([tree])
    resolved = [os.path.realpath(f.path) for f in files]
    assert resolved.count(str(tree / "a.md")) == 1


def test_symlink_loop_never_hangs(tree: Path) -> None:
    (tree / "sub" / "loop").symlink_to(tree)
    (tree / "sub" / "deeper" / "self").symlink_to(tree / "sub" / "deeper")
    code = f"import memsearch_fast as ms; print(len(ms.scan_paths([{str(tree)!r}])))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "7"


def test_missing_root_and_broken_symlink_are_reported_not_fatal(tree: Path) -> None:
    (tree / "dangling.md").symlink_to(tree / "nowhere.md")
    errors: list[ScanError] = []
    files = ms.scan_paths([tree / "missing", tree], on_error=errors.append)
    assert len(files) == 7
    assert any(e.path == str(tree / "missing") and "No such file" in e.reason for e in errors)
    assert any(e.path == str(tree / "dangling.md") for e in errors)
    assert all("\n" not in e.reason and str(e) == f"{e.path}: {e.reason}" for e in errors)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads every directory")
def test_unreadable_directory_is_reported(tree: Path) -> None:
    locked = tree / "locked"
    touch(locked / "z.md")
    locked.chmod(0)
    try:
        errors: list[ScanError] = []
        files = ms.scan_paths([tree], on_error=errors.append)
        assert len(files) == 7 and any(e.path.endswith("locked") for e in errors)
    finally:
        locked.chmod(0o755)


def test_unreadable_file_fails_alone_when_read(tree: Path) -> None:
    # The scan lists the file; reading it fails for that file only. As root,
    # permissions do not stop reads, so use a directory named like a file.
    (tree / "dir.md").mkdir()
    files = ms.scan_paths([tree / "dir.md", tree / "a.md"])
    assert names(files, tree) == ["a.md"]
    results = [fc for batch in ms.chunk_files([tree / "dir.md", tree / "a.md"]) for fc in batch]
    assert results[0].error and "directory" in results[0].error.lower()
    assert results[1].error is None and results[1].chunks


def test_tilde_is_expanded(tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tree))
    assert names(ms.scan_paths(["~/sub"]), tree) == ["sub/d.md", "sub/deeper/e.md"]


def test_scanned_file_is_pathlike(tree: Path) -> None:
    (f,) = ms.scan_paths([tree / "a.md"])
    assert Path(f).read_text().startswith("# T")
    assert f == ms.ScannedFile(f.path, f.mtime, f.size, f.ino, f.ctime)
    st = os.stat(f)
    assert (f.ino, f.ctime) == (st.st_ino, pytest.approx(st.st_ctime_ns / 1e9, abs=1e-6))
    assert f != ms.ScannedFile(f.path, f.mtime, f.size)  # another inode and ctime: another file


def test_fifo_named_like_markdown_is_reported_not_opened(tree: Path) -> None:
    fifo = tree / "pipe.md"
    os.mkfifo(fifo)
    code = (
        "import memsearch_fast as ms\n"
        f"errors = []\nfiles = ms.scan_paths([{str(tree)!r}], on_error=errors.append)\n"
        f"batches = list(ms.chunk_files([{str(fifo)!r}]))\n"
        "print(len(files), [tuple(e) for e in errors], batches[0][0].error)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"7 [('{fifo}', 'not a regular file')] not a regular file"


def test_non_utf8_file_name_is_listed(tmp_path: Path) -> None:
    raw = os.fsencode(tmp_path) + b"/caf\xe9.md"
    with open(raw, "wb") as fh:
        fh.write(b"# Cafe\nsome text\n")
    (f,) = ms.scan_paths([tmp_path])
    assert os.fsencode(f.path) == raw


def test_invalid_exclude_pattern_fails_before_walking(tree: Path) -> None:
    with pytest.raises(ValueError, match="invalid exclude pattern"):
        ms.scan_paths([tree], exclude=["a{b"])


def test_symlink_to_a_file_outside_the_root_is_not_followed(tree: Path, tmp_path: Path) -> None:
    secret = tmp_path / "secret.md"
    secret.write_text("# Secret\ntoken text\n")
    (tree / "innocent.md").symlink_to(secret)
    errors: list[ScanError] = []
    files = ms.scan_paths([tree], on_error=errors.append)
    assert "innocent.md" not in names(files, tree)
    assert any(e.path == str(tree / "innocent.md") and "outside" in e.reason for e in errors)
    # Given explicitly, the file is what the user asked for.
    assert [f.path for f in ms.scan_paths([tree / "innocent.md"])] == [str(secret)]
