"""A database this user may only read: readers work, writers say why not in one line.

A read-only database directory used to break even ``stats`` and ``search``:
the broker's lock file beside the database could not be created ("[Errno 13]
Permission denied: '<db>.lock'"). Now the lock, server record and log of such
a database live in the user's private runtime directory, the Milvus Lite 2.x
engine reads the database without its lock file, and ``index`` and ``reset``
stop at once with one line naming the read-only directory or file.

Permissions must bind for the CLI under test, which they do not for root. As
root (CI), the CLI runs with the capabilities that bypass file permissions
dropped from its bounding set (``setpriv --bounding-set
-dac_override,-dac_read_search,-fowner``): still uid 0, owner of the files,
but held to their modes like any user; failing that, as ``nobody``. The
test skips, saying why, when neither binds. Real subprocesses, real Milvus
Lite, real kernel permission checks: nothing is patched.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

from memsearch_fast.lite import settings as lite_settings
from memsearch_fast.lite import state as lite_state
from memsearch_fast.lite.version import milvus_lite_major
from tests.helpers.harness import cli_env, command, corpus, index_args, memsearch, ok, one_line_error, stop_servers

pytestmark = [
    pytest.mark.skipif(os.name != "posix", reason="the shared server needs fcntl and fork"),
    pytest.mark.skipif((milvus_lite_major() or 0) >= 3, reason="a Milvus Lite 2.x database is one SQLite file"),
]

DROP_CAPS = ["setpriv", "--bounding-set=-dac_override,-dac_read_search,-fowner"]
AS_NOBODY = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]


@cache
def restricted() -> tuple[list[str], str]:
    """A command prefix under which file permissions bind, and why there is none ("" when there is)."""
    if os.geteuid() != 0:
        return [], ""
    if shutil.which("setpriv") is None:
        return [], "running as root, and setpriv (util-linux) is not installed to drop its privileges"
    probe = Path(os.environ.get("TMPDIR", "/tmp")) / f"memsearch-ro-probe-{os.getpid()}"
    probe.mkdir(mode=0o755, exist_ok=True)
    try:
        probe.chmod(0o555)
        code = (
            "import memsearch_fast, sys\n"
            f"try:\n    open({str(probe / 'x')!r}, 'w')\nexcept PermissionError:\n    sys.exit(0)\nsys.exit(3)\n"
        )
        problems = []
        for prefix in (DROP_CAPS, AS_NOBODY):
            try:
                proc = subprocess.run(
                    [*prefix, sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd="/"
                )
            except (OSError, subprocess.SubprocessError) as exc:
                problems.append(f"{' '.join(prefix)}: {exc}")
                continue
            if proc.returncode == 0:
                return prefix, ""
            problems.append(f"{' '.join(prefix)}: exit {proc.returncode} {proc.stderr.strip()[-200:]}")
        return [], "running as root and no way to make permissions bind: " + "; ".join(problems)
    finally:
        probe.chmod(0o755)
        shutil.rmtree(probe, ignore_errors=True)


def as_user(args: list[str], env: dict[str, str], *, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """``memsearch args`` run where file permissions bind."""
    prefix, why = restricted()
    if why:
        pytest.skip(why)
    return subprocess.run(
        [*prefix, *command(*args)],
        env=env,
        cwd="/",
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        encoding="utf-8",
        errors="replace",
        timeout=timeout,
    )


def stop_as_user(db: Path, env: dict[str, str]) -> None:
    """Stop the server the restricted CLI started (its record is where that user keeps it)."""
    prefix, why = restricted()
    if not why:
        subprocess.run(
            [*prefix, sys.executable, "-m", lite_settings.SERVER_MARK, "stop", str(db)],
            env=env,
            capture_output=True,
            timeout=60,
        )


def listing(d: Path) -> dict[str, tuple[int, int]]:
    return {p.name: (p.stat().st_size, p.stat().st_mtime_ns) for p in d.iterdir()}


@pytest.fixture
def indexed(tmp_path: Path, model_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Path, Path, dict]]:
    """Notes indexed into ``dbdir/m.db`` (its server stopped); the database and its sidecars
    made world-readable (another user may read them); restored afterwards."""
    monkeypatch.delenv(lite_settings.ENV_MODE, raising=False)
    if restricted()[1]:
        pytest.skip(restricted()[1])
    notes = tmp_path / "notes"
    corpus(notes, 5_000, seed=51)
    dbdir = tmp_path / "dbdir"
    dbdir.mkdir()
    db = dbdir / "m.db"
    home = tmp_path / "home"
    env = cli_env(home)
    ok(memsearch(index_args([notes], db, model_dir, "-q"), env))
    stop_servers(tmp_path)
    for p in [tmp_path, notes, *notes.rglob("*"), home, *home.rglob("*"), dbdir, *dbdir.iterdir()]:
        p.chmod(stat.S_IMODE(p.stat().st_mode) | (0o755 if p.is_dir() else 0o644))
    if restricted()[0] == AS_NOBODY:
        for p in [home, *home.rglob("*")]:
            os.chown(p, 65534, 65534, follow_symlinks=False)
    try:
        yield notes, db, env
    finally:
        stop_as_user(db, env)
        for p in [dbdir, *dbdir.iterdir()]:
            p.chmod(0o700 if p.is_dir() else 0o600)
        stop_servers(tmp_path)


@pytest.mark.slow(reason="indexes, then reads a database made read-only, through CLI subprocesses")
def test_readers_work_on_a_read_only_database_directory(indexed: tuple[Path, Path, dict], model_dir: Path) -> None:
    notes, db, env = indexed
    want = json.loads(ok(memsearch(["stats", "--milvus-uri", str(db), "-j"], env)).stdout)
    stop_servers(db.parent)
    for p in db.parent.iterdir():
        p.chmod(0o444)
    db.parent.chmod(0o555)
    before = listing(db.parent)

    stats = json.loads(ok(as_user(["stats", "--milvus-uri", str(db), "-j"], env)).stdout)
    assert stats["chunks"] == want["chunks"] > 0 and stats["files"] == want["files"]
    hits = json.loads(
        ok(as_user(["search", "cache warming", "-j", "--milvus-uri", str(db), "-m", str(model_dir)], env)).stdout
    )
    assert hits and all(str(notes) in h["source"] for h in hits)
    expanded = ok(as_user(["expand", hits[0]["chunk_hash"], "--milvus-uri", str(db)], env)).stdout
    assert hits[0]["source"] in expanded
    got = ok(as_user(["get", hits[0]["source"], "--milvus-uri", str(db)], env)).stdout
    assert Path(hits[0]["source"]).read_text(encoding="utf-8").splitlines()[0] in got

    # Writers stop before any work, in one line naming the read-only directory.
    for args in (index_args([notes], db, model_dir, "-q"), ["reset", "--milvus-uri", str(db), "--yes"]):
        one_line_error(as_user(args, env), f"cannot write {db}", "read-only", "search, stats")
    # Embedded mode cannot open it (milvus-lite creates a lock file beside it) and says so.
    one_line_error(
        as_user(["stats", "--milvus-uri", str(db)], {**env, lite_settings.ENV_MODE: "embedded"}), "read-only"
    )
    assert listing(db.parent) == before  # nothing was created or changed beside the database


@pytest.mark.slow(reason="indexes, then reads a database made read-only, through CLI subprocesses")
def test_a_read_only_database_file_in_a_writable_directory(indexed: tuple[Path, Path, dict], model_dir: Path) -> None:
    notes, db, env = indexed
    db.chmod(0o444)
    stats = ok(as_user(["stats", "--milvus-uri", str(db)], env)).stdout
    assert "Total indexed chunks" in stats
    ok(as_user(["search", "cache warming", "--milvus-uri", str(db), "-m", str(model_dir)], env))
    one_line_error(as_user(index_args([notes], db, model_dir, "-q"), env), f"cannot write {db}", "read-only")


def test_a_new_database_in_a_read_only_directory(tmp_path: Path, model_dir: Path) -> None:
    if restricted()[1]:
        pytest.skip(restricted()[1])
    notes = tmp_path / "notes"
    corpus(notes, 2_000, seed=52)
    for p in [tmp_path, notes, *notes.rglob("*")]:
        p.chmod(stat.S_IMODE(p.stat().st_mode) | (0o755 if p.is_dir() else 0o644))
    ro = tmp_path / "ro"
    ro.mkdir(mode=0o555)
    ro.chmod(0o555)
    env = cli_env(tmp_path / "home")
    if restricted()[0] == AS_NOBODY:
        os.chown(tmp_path / "home", 65534, 65534)
    db = ro / "new.db"
    try:
        one_line_error(as_user(index_args([notes], db, model_dir, "-q"), env), f"{ro}", "read-only")
        one_line_error(as_user(["stats", "--milvus-uri", str(db)], env), "does not exist")
        assert list(ro.iterdir()) == []
    finally:
        with contextlib.suppress(OSError):
            ro.chmod(0o755)


@pytest.mark.slow(reason="indexes, then reads a database made read-only, through CLI subprocesses")
def test_a_directory_made_read_only_under_a_running_server(indexed: tuple[Path, Path, dict]) -> None:
    """Its record is beside the database, where this user's readers no longer look
    first; they use that server (a second one could not open the database)."""
    _notes, db, env = indexed
    if restricted()[0] == AS_NOBODY:
        pytest.skip("the server must be started by the reading user, who cannot write this directory")
    first = ok(as_user(["stats", "--milvus-uri", str(db)], env)).stdout
    pid = (lite_state.read_state(str(db), beside=True) or {}).get("pid")
    assert isinstance(pid, int)
    db.parent.chmod(0o555)
    try:
        assert ok(as_user(["stats", "--milvus-uri", str(db)], env)).stdout == first
        assert (lite_state.read_state(str(db), beside=True) or {}).get("pid") == pid  # no second server
    finally:
        db.parent.chmod(0o755)
