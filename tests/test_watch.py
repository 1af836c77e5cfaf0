"""`memsearch watch` as a real subprocess on real files: events, singleton, signals, exits."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers.harness import ids_by_source as stored
from tests.helpers.watcher import Watcher


def common(db: Path, model_dir: Path) -> list[str]:
    return ["--milvus-uri", str(db), "-m", str(model_dir)]


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def clean_index(
    root: Path, tmp_path: Path, model_dir: Path, env: dict[str, str], extra: list[str]
) -> dict[str, set[str]]:
    """What a fresh `memsearch index` of the same tree stores."""
    fresh = tmp_path / "fresh.db"
    out = subprocess.run(
        [sys.executable, "-m", "memsearch_fast.cli", "index", str(root), "-q", *common(fresh, model_dir), *extra],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    try:
        return stored(fresh)
    finally:
        from memsearch_fast.lite import broker

        broker.stop_server(str(fresh))


@pytest.mark.slow(reason="runs `memsearch watch` subprocesses and waits for their events")
def test_watch_follows_edits_renames_and_deletes(
    tmp_path: Path, db: Path, env: dict[str, str], model_dir: Path
) -> None:
    root = tmp_path / "notes"
    write(root / "a.md", "# Alpha\nThe alpha note mentions cats.\n")
    write(root / "sub" / "b.md", "# Beta\nThe beta note mentions dogs.\n")
    w = Watcher([str(root), *common(db, model_dir), "--exclude", "drafts/"], env)
    try:
        assert w.next("watching")["pid"] == w.proc.pid
        first = w.next("indexed")
        assert first["files"] == 2 and first["embedded"] == 2

        write(root / "c.md", "# Gamma\nA new note about parrots.\n")
        assert w.next("indexed")["changed"] == 1

        with (root / "a.md").open("a", encoding="utf-8") as f:  # a burst of appends: runs coalesce
            for i in range(5):
                f.write(f"\n## Entry {i}\nmore text {i}\n")
                f.flush()
                time.sleep(0.02)
        assert w.next("indexed")["changed"] == 1

        (root / "sub").rename(root / "moved")  # a directory rename
        moved = w.next("indexed")
        assert moved["sources_removed"] == 1

        write(root / ".hidden.md", "# Hidden\nnever indexed\n")
        write(root / "drafts" / "d.md", "# Draft\nexcluded\n")
        (root / "c.md").unlink()
        deleted = w.next("indexed")
        assert deleted["sources_removed"] >= 1

        have = stored(db)
        assert sorted(Path(s).relative_to(root).as_posix() for s in have) == ["a.md", "moved/b.md"]
        assert have == clean_index(root, tmp_path, model_dir, env, ["--exclude", "drafts/"])
    finally:
        assert w.stop() == 0
    assert w.next("stopped")["reason"] == "stopped"


@pytest.mark.slow(reason="runs `memsearch watch` subprocesses and waits for their events")
def test_watch_inside_a_hidden_root(tmp_path: Path, db: Path, env: dict[str, str], model_dir: Path) -> None:
    """An agent's memory lives in `.memsearch/memory`: events below a hidden root count."""
    root = tmp_path / "proj" / ".memsearch" / "memory"
    write(root / "2026-11-23.md", "## Session 10:00\n\n### 10:00\n- User asked about cats.\n")
    w = Watcher([str(root), *common(db, model_dir)], env)
    try:
        assert w.next("indexed")["files"] == 1
        with (root / "2026-11-23.md").open("a", encoding="utf-8") as f:
            f.write("\n### 10:05\n- User asked about dogs.\n")
        assert w.next("indexed", timeout=30)["changed"] == 1
        write(root / ".draft.md", "# Hidden\nnever indexed\n")
        write(root / "2026-11-24.md", "### 09:00\n- User asked about parrots.\n")
        assert w.next("indexed", timeout=30)["changed"] == 1
        assert sorted(Path(s).name for s in stored(db)) == ["2026-11-23.md", "2026-11-24.md"]
    finally:
        assert w.stop() == 0


@pytest.mark.slow(reason="runs `memsearch watch` subprocesses and waits for their events")
def test_one_watcher_per_database_and_roots(tmp_path: Path, db: Path, env: dict[str, str], model_dir: Path) -> None:
    root = tmp_path / "notes"
    write(root / "a.md", "# Alpha\ncats\n")
    first = Watcher([str(root), *common(db, model_dir)], env)
    try:
        first.next("indexed")
        second = Watcher([str(root), *common(db, model_dir)], env)
        busy = second.next("already_running")
        assert busy["pid"] == first.proc.pid
        assert second.wait() == 0

        # A killed holder leaves no lock behind: the next watcher takes over.
        first.proc.kill()
        first.proc.wait(timeout=30)
        third = Watcher([str(root), *common(db, model_dir)], env)
        try:
            assert third.next("watching")["pid"] == third.proc.pid
            third.next("indexed")
        finally:
            assert third.stop(signal.SIGINT) == 0
    finally:
        first.stop()


@pytest.mark.slow(reason="runs `memsearch watch` subprocesses and waits for their events")
def test_watcher_exits_when_its_roots_are_deleted(
    tmp_path: Path, db: Path, env: dict[str, str], model_dir: Path
) -> None:
    root = tmp_path / "worktree" / "memory"
    write(root / "2026-11-23.md", "# Today\nsomething happened\n")
    w = Watcher([str(root), *common(db, model_dir)], env)
    w.next("indexed")
    shutil.rmtree(tmp_path / "worktree")
    assert "gone" in w.next("stopped", timeout=60)["reason"]
    assert w.wait() == 0


@pytest.mark.slow(reason="runs `memsearch watch` subprocesses and waits for their events")
def test_start_stop_cycles_leave_no_watcher_behind(
    tmp_path: Path, db: Path, env: dict[str, str], model_dir: Path
) -> None:
    root = tmp_path / "notes"
    write(root / "a.md", "# Alpha\ncats\n")
    pids = []
    for i in range(6):
        w = Watcher([str(root), *common(db, model_dir)], env)
        pids.append(w.proc.pid)
        if i % 2:
            w.next("watching")  # stop it while it may still be indexing
        else:
            w.next("indexed")
        assert w.stop(signal.SIGTERM if i % 3 else signal.SIGINT) == 0
    time.sleep(0.5)
    alive = [pid for pid in pids if Path(f"/proc/{pid}").exists()]
    assert alive == []


@pytest.mark.parametrize("name", ["notes", ".memsearch/memory"])
def test_a_root_replaced_in_place_is_watched_again(
    tmp_path: Path, db: Path, env: dict[str, str], model_dir: Path, name: str
) -> None:
    """`rm -rf notes && cp -a notes.bak notes`: the new directory is watched and indexed,
    not the old one the watcher was armed on (whose inode number the new one may reuse)."""
    root = tmp_path / name
    write(root / "a.md", "# Alpha\nThe alpha note mentions cats.\n")
    backup = tmp_path / "notes.bak"
    write(backup / "a.md", "# Alpha\nThe alpha note mentions cats.\n")
    write(backup / "restored.md", "# Restored\nThe restored note mentions otters.\n")
    w = Watcher([str(root), *common(db, model_dir)], env)
    try:
        w.next("indexed")
        shutil.rmtree(root)
        shutil.copytree(backup, root)
        replaced = w.next("indexed", timeout=30)
        assert replaced["changed"] >= 1, replaced
        write(root / "later.md", "# Later\nA note written after the swap mentions herons.\n")
        later = w.next("indexed", timeout=30)
        assert later["changed"] == 1, later
        assert sorted(Path(s).name for s in stored(db)) == ["a.md", "later.md", "restored.md"]
    finally:
        assert w.stop() == 0
