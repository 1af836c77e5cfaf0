"""One writer per database and collection.

Two `index` runs over different states of one tree (files deleted between
their starts) used to interleave, each diffing against what the other had
not yet written, and left rows of deleted files behind. Now `index`, `watch`
runs and `reset` hold the collection's writer lock (the manifest's lock file;
`index` from before its scan): a second writer waits, saying whose run it
waits for, and indexes the tree as the first one left it; readers never wait.
Real `memsearch` subprocesses, a real database, the shared model.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from memsearch_fast.lite import settings as lite_settings
from memsearch_fast.store.manifest import Manifest
from tests.helpers.harness import (
    COLLECTION,
    Background,
    assert_same,
    chunk_rows,
    cli_env,
    corpus,
    dump,
    index_args,
    memsearch,
    ok,
    stop_servers,
)

pytestmark = pytest.mark.skipif(os.name != "posix", reason="the writer lock needs flock")

WAITING = "waiting for it to finish"


@pytest.fixture
def work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.delenv(lite_settings.ENV_MODE, raising=False)
    yield tmp_path
    stop_servers(tmp_path)


@pytest.mark.slow(reason="two real writers on one collection, the second waiting for the first")
def test_second_writer_waits_and_indexes_the_tree_the_first_left(work: Path, model_dir: Path) -> None:
    notes = work / "notes"
    files = corpus(notes, 60_000, seed=11)
    db = work / "m.db"
    env = cli_env(work / "home")
    ok(memsearch(index_args([notes], db, model_dir, "-q"), env))
    before = dump(db)

    writer = Manifest.for_store(str(db), COLLECTION)
    writer.acquire()  # an index run of this process holds the collection
    try:
        assert int(writer.lock_path.read_text()) == os.getpid()
        first = Background(index_args([notes], db, model_dir, "-j"), env, work / "logs", "first")
        assert first.wait_for(WAITING, 120), first.stderr()
        line = next(ln for ln in first.stderr().splitlines() if WAITING in ln)
        assert f"pid {os.getpid()}" in line and f"collection '{COLLECTION}' of {db}" in line

        # The tree changes while the first run waits: files deleted, one edited.
        deleted = files[1::3]
        for f in deleted:
            f.unlink()
        with open(files[0], "a", encoding="utf-8") as fh:
            fh.write("\n\n## Later\n\nA paragraph written while the first run waited.\n")
        second = Background(index_args([notes], db, model_dir, "-j"), env, work / "logs", "second")
        assert second.wait_for(WAITING, 120), second.stderr()

        # Readers never wait for the writer lock.
        started = time.monotonic()
        stats = json.loads(ok(memsearch(["stats", "-j", "--milvus-uri", str(db)], env, timeout=60)).stdout)
        assert time.monotonic() - started < 45
        assert stats["chunks"] == chunk_rows(before)
        assert first.proc.poll() is None and second.proc.poll() is None
    finally:
        writer.release()

    for run in (first, second):
        assert run.wait(300) == 0, run.stderr()
        report = json.loads(run.stdout())
        assert report["failed"] == [], report
        assert sum(WAITING in ln for ln in run.stderr().splitlines()) == 1

    got = dump(db)
    assert not {r[0] for r in got.values()} & {str(f) for f in deleted}
    clean = work / "clean.db"
    ok(memsearch(index_args([notes], clean, model_dir, "-q"), env))
    assert_same(got, dump(clean), "after two waiting writers")


@pytest.mark.slow(reason="two real writers on one collection, the second waiting for the first")
def test_watch_run_waits_for_the_writer_and_reset_too(work: Path, model_dir: Path) -> None:
    notes = work / "notes"
    corpus(notes, 20_000, seed=12)
    db = work / "m.db"
    env = cli_env(work / "home")
    writer = Manifest.for_store(str(db), COLLECTION)
    writer.acquire()
    try:
        watch = Background(
            ["watch", str(notes), "--milvus-uri", str(db), "-m", str(model_dir), "--debounce-ms", "200"],
            env,
            work / "logs",
            "watch",
        )
        assert watch.wait_for(WAITING, 120), watch.stderr()
        assert f"pid {os.getpid()}" in watch.stderr()
        time.sleep(0.5)
        assert "indexed:" not in watch.stderr()
    finally:
        writer.release()
    try:
        assert watch.wait_for("indexed:", 120), watch.stderr()
    finally:
        watch.signal(signal.SIGTERM)
        assert watch.wait(120) == 0, watch.stderr()
    assert dump(db)

    writer.acquire()
    try:
        reset = Background(["reset", "--yes", "--milvus-uri", str(db)], env, work / "logs", "reset")
        assert reset.wait_for(WAITING, 60), reset.stderr()
        assert reset.proc.poll() is None and dump(db)  # not dropped under a writer
    finally:
        writer.release()
    assert reset.wait(120) == 0, reset.stderr()
    assert "Dropped collection" in reset.stdout()
    assert dump(db) == {}


def test_a_killed_writer_does_not_block_the_next(work: Path, model_dir: Path) -> None:
    """The kernel releases the lock of a writer killed with -9; its pid stays in the file."""
    notes = work / "notes"
    corpus(notes, 20_000, seed=13)
    db = work / "m.db"
    env = cli_env(work / "home")
    writer = Manifest.for_store(str(db), COLLECTION)
    writer.acquire()
    try:
        run = Background(index_args([notes], db, model_dir, "-q"), env, work / "logs", "killed")
        assert run.wait_for(WAITING, 120), run.stderr()
    finally:
        writer.release()
    deadline = time.monotonic() + 30
    while writer.lock_path.read_text().strip() != str(run.pid) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert writer.lock_path.read_text().strip() == str(run.pid)  # it holds the lock now
    run.kill()
    started = time.monotonic()
    ok(memsearch(index_args([notes], db, model_dir, "-q"), env))
    assert time.monotonic() - started < 120
    assert dump(db)
