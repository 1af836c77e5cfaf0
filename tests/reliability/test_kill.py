"""kill -9, SIGINT and SIGTERM during index runs, and a corpus of bad inputs.

Each kill point is a real ``memsearch index`` subprocess over a generated
corpus, killed after a delay drawn from a seeded generator (the schedule is
the same on every run; where in the run it lands depends on the machine's
speed). A following clean ``memsearch index`` must then leave exactly what a
clean index of the same files into a fresh database holds: the same ids,
sources, line ranges, headings and content, and count(*) equal to the
number of distinct rows (no duplicate, no stale, no lost row). Vectors are not
compared: the int8 model's vector for a text varies slightly with its batch.

The long variant (100 kill points, concurrent index/search/watch for 30
minutes) is ``benches/reliability_long.py``.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import shutil
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from memsearch_fast._os import pid_alive
from memsearch_fast.lite import broker as lite_broker
from memsearch_fast.lite import settings as lite_settings
from tests.helpers.harness import (
    Background,
    Window,
    assert_same,
    bad_corpus,
    cli_env,
    copy_database,
    corpus,
    dump,
    index_args,
    memsearch,
    mutate,
    ok,
    server_pids,
    signal_and_repair,
    stop_servers,
    timed_run,
)

pytestmark = [
    pytest.mark.xdist_group("kill"),  # its module fixture is built once, on one worker
    pytest.mark.skipif(os.name != "posix", reason="signals and the shared server need POSIX"),
]

SEED = 15_2026
CORPUS_BYTES = 80_000
COLD_POINTS = 4  # two anywhere in the run, two within its writes; the long run has 100
WARM_POINTS = 5
INTERRUPTED = "interrupted; what was written is kept, rerun to finish"


@dataclass
class Lab:
    base: Path
    env: dict[str, str]
    model: Path
    cold_tree: Path  # the corpus, indexed cold by each cold kill point
    want_cold: dict[str, Any]  # a clean index of cold_tree
    cold: Window
    warm_tree: Path  # the corpus after an incremental change
    warm_base: Path  # a stopped database of warm_tree before the change (with its manifest)
    want_warm: dict[str, Any]  # a clean index of warm_tree after the change
    warm: Window  # of the incremental run from warm_base


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory, model_dir: Path) -> Iterator[Lab]:
    base = tmp_path_factory.mktemp("kill")
    saved = os.environ.pop(lite_settings.ENV_MODE, None)
    env = cli_env(base / "home")
    cold_tree = base / "cold" / "notes"
    corpus(cold_tree, CORPUS_BYTES, seed=SEED)
    warm_tree = base / "warm" / "notes"
    shutil.copytree(cold_tree, warm_tree)
    try:
        cold = timed_run(env, model_dir, base / "ref-cold.db", cold_tree)
        want_cold = dump(base / "ref-cold.db")

        warm_base = base / "warm-base.db"
        ok(memsearch(index_args([warm_tree], warm_base, model_dir, "-q"), env))
        lite_broker.stop_server(str(warm_base))
        mutate(warm_tree, seed=SEED)
        ok(memsearch(index_args([warm_tree], base / "ref-warm.db", model_dir, "-q"), env))
        want_warm = dump(base / "ref-warm.db")

        timed = base / "warm-timed.db"
        copy_database(warm_base, timed)
        warm = timed_run(env, model_dir, timed, warm_tree)
        assert_same(dump(timed), want_warm, "an uninterrupted incremental run")
        stop_servers(base)
        yield Lab(base, env, model_dir, cold_tree, want_cold, cold, warm_tree, warm_base, want_warm, warm)
    finally:
        stop_servers(base)
        if saved is not None:
            os.environ[lite_settings.ENV_MODE] = saved


def _delay(seed: int, window: Window, from_writes: bool) -> float:
    """A seeded point in the run, or (``from_writes``) in its writes."""
    span = window.end - window.first_write if from_writes else window.end
    return random.Random(seed).uniform(0.02, 0.95) * max(span, 0.05)


@pytest.mark.parametrize("point", range(COLD_POINTS))
@pytest.mark.slow(reason="a kill -9 at each of four seeded points of a cold index, then a repair run")
@pytest.mark.timeout(300)  # 40-85 s on two busy cores: past the suite's 120 s limit on a slower machine
def test_kill9_during_a_cold_index(lab: Lab, point: int) -> None:
    """Kill points over the whole run (embedding, before any row) and over its writes."""
    from_writes = point % 2 == 1
    delay = _delay(SEED * 1000 + point, lab.cold, from_writes)
    db = lab.base / f"cold-{point}.db"
    try:
        status, _err, left = signal_and_repair(lab.env, lab.model, db, lab.cold_tree, delay, from_writes=from_writes)
        where = "after the first write" if from_writes else "after the store opened"
        print(f"cold point {point}: kill {delay:.2f} s {where} ({lab.cold}), status {status}, {left} rows left")
        assert_same(dump(db), lab.want_cold, f"cold kill point {point} ({delay:.2f} s {where})")
    finally:
        lite_broker.stop_server(str(db))


@pytest.mark.parametrize("point", range(WARM_POINTS))
@pytest.mark.slow(reason="kills a real `memsearch index` (or its server) mid-run, then indexes again")
def test_kill9_during_an_incremental_index(lab: Lab, point: int) -> None:
    from_writes = point % 2 == 1
    delay = _delay(SEED * 2000 + point, lab.warm, from_writes)
    db = lab.base / f"warm-{point}.db"
    copy_database(lab.warm_base, db)
    try:
        status, _err, left = signal_and_repair(lab.env, lab.model, db, lab.warm_tree, delay, from_writes=from_writes)
        where = "after the first write" if from_writes else "after the store opened"
        print(f"warm point {point}: kill {delay:.2f} s {where} ({lab.warm}), status {status}, {left} rows left")
        assert_same(dump(db), lab.want_warm, f"incremental kill point {point} ({delay:.2f} s {where})")
    finally:
        lite_broker.stop_server(str(db))


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.slow(reason="kills a real `memsearch index` (or its server) mid-run, then indexes again")
def test_sigint_and_sigterm_write_what_is_done_and_exit_130(lab: Lab, sig: int) -> None:
    db = lab.base / f"{signal.Signals(sig).name}.db"
    try:
        status, err, left = signal_and_repair(lab.env, lab.model, db, lab.cold_tree, 0.4 * lab.cold.end, sig)
        print(f"{signal.Signals(sig).name}: status {status}, {left} rows left")
        if status != 0:  # 0: the run was done before the signal came (a fast machine)
            assert status == 130, err
            assert err.strip().splitlines()[-1] == INTERRUPTED, err
            assert "Traceback" not in err
        assert_same(dump(db), lab.want_cold, signal.Signals(sig).name)
    finally:
        lite_broker.stop_server(str(db))


@pytest.mark.slow(reason="kills a real `memsearch index` (or its server) mid-run, then indexes again")
def test_kill9_of_the_lite_server_during_an_index(lab: Lab) -> None:
    """The server (and its engine) killed under a running index: the run re-attaches to a new
    server or fails in one line, never hangs; the next run completes the index."""
    db = lab.base / "server-kill.db"
    try:
        run = Background(index_args([lab.cold_tree], db, lab.model, "-q"), lab.env, lab.base / "logs", "server-kill")
        deadline = time.monotonic() + 120
        while not lite_broker.server_status(str(db)) and time.monotonic() < deadline and run.proc.poll() is None:
            time.sleep(0.02)
        pids = server_pids(db)
        assert pids, run.stderr()
        time.sleep(random.Random(SEED).uniform(0.1, 0.8) * lab.cold.end)
        for pid in pids:
            if pid_alive(pid):
                os.kill(pid, signal.SIGKILL)
        status = run.wait(180)
        err = run.stderr()
        print(f"server killed: the run's status {status}, {len(dump(db))} rows left")
        assert "Traceback" not in err
        if status != 0:
            assert status == 1 and len([ln for ln in err.splitlines() if ln.strip()]) == 1, err
        ok(memsearch(index_args([lab.cold_tree], db, lab.model, "-q"), lab.env))
        assert_same(dump(db), lab.want_cold, "after the server was killed")
    finally:
        lite_broker.stop_server(str(db))


# -- bad inputs ------------------------------------------------------------------------------


@pytest.mark.slow(reason="kills a real `memsearch index` (or its server) mid-run, then indexes again")
def test_bad_inputs_fail_one_line_each_and_the_rest_is_indexed(tmp_path: Path, model_dir: Path) -> None:
    root = tmp_path / "notes"
    bad = bad_corpus(root, SEED + 1)
    db = tmp_path / "m.db"
    env = cli_env(tmp_path / "home")
    try:
        proc = memsearch(index_args([root], db, model_dir, "-j"), env, timeout=300)
        assert proc.returncode == 1, proc.stderr  # some files failed: the CLI's status for that
        report = json.loads(proc.stdout)
        failed = {f["path"]: f["reason"] for f in report["failed"]}
        expected = {str(bad[k]) for k in ("loop_a", "loop_b", "fifo", "forged_name")}
        assert set(failed) == expected, failed
        assert all(reason and "\n" not in reason for reason in failed.values())
        assert report["invalid_utf8"] == [str(bad["invalid_utf8"])]
        # The failure list on stderr: one line per file, the newline of the name escaped.
        lines = proc.stderr.splitlines()
        listed = [ln for ln in lines if ln.startswith("  ")]
        assert any(ln.startswith("  " + str(root / "forged\\n  FORGED-LINE: indexed fine.md") + ": ") for ln in listed)
        assert not any(ln.strip().startswith("FORGED-LINE") for ln in lines)
        assert "Traceback" not in proc.stderr

        rows = dump(db)
        sources = {r[0] for r in rows.values()}
        good = {str(p) for p in root.rglob("*.md") if p.is_file() and not p.is_symlink() and str(p) not in expected}
        assert sources == good - {str(p) for p in good if os.path.getsize(p) == 0}
        assert str(bad["dir_as_md"] / "inside.md") in sources

        # The directory named like a file becomes a file; the pipe goes; the loop stays.
        shutil.rmtree(bad["dir_as_md"])
        bad["dir_as_md"].write_text("# Folder\n\nNow a file where a directory was.\n", encoding="utf-8")
        bad["fifo"].unlink()
        again = memsearch(index_args([root], db, model_dir, "-j"), env, timeout=300)
        assert again.returncode == 1, again.stderr
        assert {f["path"] for f in json.loads(again.stdout)["failed"]} == expected - {str(bad["fifo"])}
        clean = tmp_path / "clean.db"
        memsearch(index_args([root], clean, model_dir, "-q"), env, timeout=300)
        assert_same(dump(db), dump(clean), "the bad corpus after a directory became a file")
    finally:
        stop_servers(tmp_path)


def test_a_file_that_vanishes_after_the_scan_is_one_failure(tmp_path: Path, model_dir: Path) -> None:
    """Deleted between the scan and its read: reported in one line, the rest indexed."""
    from memsearch_fast.api import MemSearch
    from memsearch_fast.index import NullProgress

    root = tmp_path / "notes"
    corpus(root, 10_000, seed=SEED + 2)
    victim = root / "vanishing.md"
    victim.write_text("# Gone soon\n\nThis file is deleted after the scan.\n", encoding="utf-8")
    db = tmp_path / "m.db"

    class DeleteAfterScan(NullProgress):
        def start(self, files: int, size: int = 0) -> None:
            victim.unlink()

    try:
        with MemSearch([str(root)], embedding_model=str(model_dir), milvus_uri=str(db)) as ms:
            report = asyncio.run(ms.index_with_report(progress=DeleteAfterScan()))
            assert [p for p, _ in report.failed] == [str(victim)]
            assert "\n" not in report.failed[0][1] and report.failed[0][1]
            sources = {r[0] for r in dump(db).values()}
            assert sources == {str(p) for p in root.rglob("*.md")} and str(victim) not in sources
    finally:
        stop_servers(tmp_path)
