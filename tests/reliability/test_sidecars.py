"""Hostile files beside a Milvus Lite database, and records that lie.

Anyone who can write the database's directory can plant symlinks, FIFOs and
forged server records there. Real servers in temp dirs, real symlinks, real
second databases: the files links point at must stay intact, a forged or stale
record must neither redirect a client to another database's server nor get
that server killed, and what memsearch creates is private to its user.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import os
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from memsearch_fast._os import pid_alive
from memsearch_fast.lite import broker as lite_broker
from memsearch_fast.lite import process as lite_process
from memsearch_fast.lite import settings as lite_settings
from memsearch_fast.lite import sidecars as lite_sidecars
from memsearch_fast.lite import sockets as lite_sockets
from memsearch_fast.lite import state as lite_state
from memsearch_fast.store import MilvusStore, StoreError, StoreUnavailableError

pytestmark = pytest.mark.skipif(os.name != "posix", reason="the shared server needs fcntl and fork")

DIM = 8
LITE_MAJOR = int(importlib.metadata.version("milvus-lite").split(".")[0])
VICTIM = b"precious victim content\n"


def rows(start: int, n: int) -> list[dict[str, Any]]:
    v = np.random.default_rng(start).standard_normal((n, DIM)).astype(np.float32)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    return [
        {
            "chunk_hash": f"{start + i:064x}",
            "embedding": v[i].tolist(),
            "content": f"row {start + i}",
            "source": f"notes/{start + i}.md",
            "heading": "H",
            "heading_level": 1,
            "start_line": 1,
            "end_line": 2,
        }
        for i in range(n)
    ]


def mode(path: str | Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def fill(db: str, n: int, start: int = 0) -> dict[str, Any]:
    """Index ``n`` rows into ``db`` through its server; the server's record."""
    s = MilvusStore(db, dimension=DIM)
    s.upsert(rows(start, n))
    s.flush()
    s.close()
    st = lite_state.read_state(db)
    assert st and pid_alive(st["pid"])
    return st


def count(db: str) -> int:
    s = MilvusStore(db)
    try:
        return s.count()
    finally:
        s.close()


def finishes(fn: Callable[[], Any], timeout: float) -> tuple[bool, Any]:
    """Run ``fn`` in a thread: (finished within ``timeout``, its result)."""
    out: list[Any] = []
    t = threading.Thread(target=lambda: out.append(fn()), daemon=True)
    t.start()
    t.join(timeout)
    return (not t.is_alive(), out[0] if out else None)


@pytest.fixture
def dbdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A directory for databases; every server started on one is stopped afterwards."""
    monkeypatch.delenv(lite_settings.ENV_MODE, raising=False)
    yield tmp_path
    for state in tmp_path.rglob("*.server.json"):
        lite_broker.stop_server(str(state)[: -len(".server.json")])


def victim(tmp_path: Path, name: str, content: bytes = VICTIM) -> Path:
    v = tmp_path / "elsewhere" / name
    v.parent.mkdir(exist_ok=True)
    v.write_bytes(content)
    os.chmod(v, 0o644)
    return v


# -- symlinks, FIFOs -----------------------------------------------------------------------


def test_symlinked_log_is_replaced_and_its_target_kept(dbdir: Path) -> None:
    """Past 1 MB the log used to be reopened "wb" through the link, truncating its target."""
    db = str(dbdir / "m.db")
    big = victim(dbdir, "big.log", VICTIM * 60_000)  # > 1 MB: the size that triggers rotation
    os.symlink(big, db + ".server.log")
    fill(db, 2)
    assert big.read_bytes() == VICTIM * 60_000 and mode(big) == 0o644
    log = db + ".server.log"
    assert stat.S_ISREG(os.lstat(log).st_mode) and mode(log) == 0o600


def test_symlinked_broker_lock_is_refused(dbdir: Path) -> None:
    db = str(dbdir / "m.db")
    target = dbdir / "elsewhere" / "created-through-link"
    target.parent.mkdir()
    os.symlink(target, db + ".lock")  # dangling: an O_CREAT through it would create the target
    with pytest.raises(StoreUnavailableError) as ei:
        MilvusStore(db, dimension=DIM)
    msg = str(ei.value)
    assert "\n" not in msg and db + ".lock" in msg and "symbolic link" in msg
    assert not target.exists() and lite_state.read_state(db) is None
    existing = victim(dbdir, "existing")
    os.unlink(db + ".lock")
    os.symlink(existing, db + ".lock")
    with pytest.raises(StoreUnavailableError, match="symbolic link"):
        MilvusStore(db, dimension=DIM)
    assert existing.read_bytes() == VICTIM and mode(existing) == 0o644


def test_symlinked_record_temp_file_is_not_written_through(dbdir: Path) -> None:
    """The record's temp file used to be opened "w" through a link, overwriting its target."""
    db = str(dbdir / "m.db")
    tmp_target = victim(dbdir, "tmp-target")
    record_target = victim(dbdir, "record-target")
    os.symlink(tmp_target, f"{db}.server.json.{os.getpid()}.tmp")
    os.symlink(record_target, db + ".server.json")
    assert lite_state.read_state(db) is None  # a linked record is no record
    lite_state.write_state(db, {"pid": 1, "status": "starting"})
    assert tmp_target.read_bytes() == VICTIM and record_target.read_bytes() == VICTIM
    record = db + ".server.json"
    assert stat.S_ISREG(os.lstat(record).st_mode) and mode(record) == 0o600
    assert lite_state.read_state(db) == {"pid": 1, "status": "starting"}
    assert not os.path.lexists(f"{db}.server.json.{os.getpid()}.tmp")
    # a server started over a linked record replaces the link, not its target
    os.unlink(record)
    os.symlink(record_target, record)
    fill(db, 1)
    assert record_target.read_bytes() == VICTIM and stat.S_ISREG(os.lstat(record).st_mode)


@pytest.mark.skipif(LITE_MAJOR >= 3, reason="the engine lock file belongs to milvus-lite 2.x")
def test_symlinked_engine_lock_is_refused(dbdir: Path) -> None:
    db = str(dbdir / "m.db")
    target = dbdir / "elsewhere" / "engine-lock-target"
    target.parent.mkdir()
    os.symlink(target, str(dbdir / ".m.db.lock"))
    with pytest.raises(StoreUnavailableError) as ei:
        MilvusStore(db, dimension=DIM)
    msg = str(ei.value)
    assert "\n" not in msg and str(dbdir / ".m.db.lock") in msg and "symbolic link" in msg
    assert not target.exists()


def test_fifo_sidecars_do_not_hang(dbdir: Path) -> None:
    """A FIFO planted as the record or the log used to block open() for ever."""
    db = str(dbdir / "m.db")
    record = db + ".server.json"
    os.mkfifo(record)
    done = False
    try:
        done, result = finishes(lambda: lite_state.read_state(db), 10)
        assert done and result is None
    finally:
        if not done:  # release the blocked reader
            with contextlib.suppress(OSError):
                os.close(os.open(record, os.O_WRONLY | os.O_NONBLOCK))
        os.unlink(record)  # nothing else (the fixture's cleanup) may block on it
    log = db + ".server.log"
    os.mkfifo(log)
    done = False
    try:
        done, _ = finishes(lambda: fill(db, 1), 60)
        assert done, "opening the store blocked on a FIFO log"
    finally:
        if not done:
            with contextlib.suppress(OSError):
                os.close(os.open(log, os.O_RDONLY | os.O_NONBLOCK))
    assert stat.S_ISREG(os.lstat(log).st_mode) and mode(log) == 0o600


# -- records that lie ----------------------------------------------------------------------


@pytest.mark.slow(reason="starts Milvus Lite servers to forge and check their records")
def test_forged_record_does_not_redirect_to_another_database(dbdir: Path) -> None:
    """`m.db`'s record forged to name the server of `m.db2.db` (whose command line contains
    `m.db` as a substring): clients of `m.db` still reach `m.db`, and `m.db2.db`'s server lives."""
    a, b = str(dbdir / "m.db"), str(dbdir / "m.db2.db")
    b_st = fill(b, 5)
    a_st = fill(a, 3, start=100)
    forged = {k: b_st[k] for k in ("pid", "status", "address", "uri")}

    # the live server of m.db with the address of m.db2.db's server
    lite_state.write_state(a, {**forged, "pid": a_st["pid"]})
    assert count(a) == 3
    assert lite_state.read_state(a)["pid"] == a_st["pid"]  # its own server, not restarted

    # m.db2.db's whole record copied over m.db's (m.db's own server stopped first)
    lite_broker.stop_server(a)
    lite_state.write_state(a, forged)
    assert count(a) == 3
    assert lite_state.read_state(a)["pid"] != b_st["pid"]

    # a dead pid with m.db2.db's socket: cleaning up after it must not remove that socket
    lite_broker.stop_server(a)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    lite_state.write_state(a, {**forged, "pid": dead.pid})
    assert count(a) == 3
    assert os.path.exists(b_st["address"][len("unix:") :])

    time.sleep(1.5)  # a server whose socket vanished exits within about a second
    assert pid_alive(b_st["pid"])
    assert lite_broker.server_status(b)["pid"] == b_st["pid"] and count(b) == 5


@pytest.mark.slow(reason="starts Milvus Lite servers to forge and check their records")
def test_stale_record_naming_another_databases_server_does_not_kill_it(dbdir: Path) -> None:
    """A stale record of `m.db` whose pid (and engine pid) now belong to `m.db2.db`'s server."""
    a, b = str(dbdir / "m.db"), str(dbdir / "m.db2.db")
    b_st = fill(b, 5)
    lite_state.write_state(
        a,
        {
            "pid": b_st["pid"],
            "status": "ready",
            "address": "unix:/nonexistent/memsearch.sock",
            "uri": "unix:/nonexistent/memsearch.sock",
            "engine_pid": b_st.get("engine_pid"),
        },
    )
    s = MilvusStore(a, dimension=DIM)
    s.close()
    a_pid = lite_state.read_state(a)["pid"]
    assert a_pid != b_st["pid"]
    assert pid_alive(b_st["pid"])
    if b_st.get("engine_pid"):
        assert pid_alive(b_st["engine_pid"])
    assert count(b) == 5 and lite_state.read_state(b)["pid"] == b_st["pid"]


def test_socket_not_served_by_the_recorded_pid_is_not_used(dbdir: Path) -> None:
    """The record's pid runs what looks like `m.db`'s server, but the socket named after
    it is served by another process: SO_PEERCRED shows the mismatch; nothing is sent to it."""
    if not hasattr(socket, "SO_PEERCRED"):
        pytest.skip("needs SO_PEERCRED")
    db = str(dbdir / "m.db")
    impostor = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(300)", "-m", lite_settings.SERVER_MARK, "serve", db]
    )
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        deadline = time.monotonic() + 30  # until the child has exec'd (its command line is set)
        while not lite_process.is_ours(impostor.pid, db) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert lite_process.is_ours(impostor.pid, db)  # its command line alone would pass
        sock = lite_sockets.socket_path(db, impostor.pid)
        listener.bind(sock)
        listener.listen(8)
        address = "unix:" + sock
        lite_state.write_state(db, {"pid": impostor.pid, "status": "ready", "address": address, "uri": address})
        s = MilvusStore(db, dimension=DIM)
        s.upsert(rows(0, 2))
        assert s.count() == 2
        s.close()
        assert lite_state.read_state(db)["pid"] not in (impostor.pid, os.getpid())
        listener.setblocking(False)
        received = b""
        while True:  # the check's probe connected; no client spoke to the socket
            try:
                conn, _ = listener.accept()
            except BlockingIOError:
                break
            with conn:
                conn.settimeout(0.5)
                with contextlib.suppress(TimeoutError):
                    received += conn.recv(4096)
        assert received == b""
    finally:
        listener.close()
        impostor.kill()
        impostor.wait()


def serve_tcp(db: str) -> tuple[subprocess.Popen[bytes], dict[str, Any]]:
    """``serve DB --port 0`` (TCP, as tools run it) and its ready record."""
    proc = subprocess.Popen(
        [sys.executable, "-m", lite_settings.SERVER_MARK, "serve", db, "--port", "0"], stderr=subprocess.DEVNULL
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        st = lite_state.read_state(db)
        if st and st.get("status") == "ready":
            return proc, st
        assert proc.poll() is None, "the TCP server exited"
        time.sleep(0.1)
    raise AssertionError("the TCP server did not start")


@pytest.mark.slow(reason="starts Milvus Lite servers to forge and check their records")
def test_tcp_server_is_checked_by_its_listening_port(dbdir: Path) -> None:
    """A `--port` server is attached to when it owns the recorded port (the 2.x engine
    listens on an IPv4-mapped IPv6 socket); a record naming another server's port is not followed."""
    a, b = str(dbdir / "m.db"), str(dbdir / "m.db2.db")
    procs = []
    try:
        for db, n in ((a, 3), (b, 5)):
            proc, st = serve_tcp(db)
            procs.append(proc)
            assert st["address"].startswith("127.0.0.1:")
            assert fill(db, n)["pid"] == st["pid"] == proc.pid  # attached, not replaced
        a_st, b_st = lite_state.read_state(a), lite_state.read_state(b)
        assert lite_process.verify_server(a, a_st)[0] == a_st["address"]
        lite_state.write_state(a, {**a_st, "address": b_st["address"], "uri": b_st["uri"]})
        assert lite_process.verify_server(a, lite_state.read_state(a))[0] is None
        assert count(a) == 3  # m.db's own data, from a server of m.db
        assert pid_alive(b_st["pid"]) and count(b) == 5
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(30)


# -- modes ---------------------------------------------------------------------------------


def test_fresh_sidecars_and_database_are_private(dbdir: Path) -> None:
    old = os.umask(0o022)
    try:
        parent = dbdir / "new"
        db = str(parent / "m.db")
        st = fill(db, 3)
        assert mode(parent) == 0o700
        assert mode(db) == (0o700 if LITE_MAJOR >= 3 else 0o600)
        for name in ("lock", "state", "log"):
            assert mode(lite_sidecars.sidecar_paths(db)[name]) == 0o600, name
        assert lite_broker.stop_server(db) and not pid_alive(st["pid"])
        # an existing database keeps its modes; an older version's 0644 sidecar is tightened
        os.chmod(db, 0o750 if LITE_MAJOR >= 3 else 0o640)
        os.chmod(db + ".server.log", 0o644)
        assert count(db) == 3
        assert mode(db) == (0o750 if LITE_MAJOR >= 3 else 0o640)
        assert mode(db + ".server.log") == 0o600
    finally:
        os.umask(old)


@pytest.mark.skipif(LITE_MAJOR >= 3, reason="the engine lock file belongs to milvus-lite 2.x")
def test_engine_lock_is_held_while_the_server_serves(dbdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """milvus-lite's Server object used to delete the engine's lock file when collected,
    so an embedded opener found the database free while the server's engine had it open."""
    db = str(dbdir / "m.db")
    fill(db, 2)
    assert os.path.isfile(dbdir / ".m.db.lock")
    monkeypatch.setenv(lite_settings.ENV_MODE, "embedded")
    with pytest.raises(StoreUnavailableError):
        MilvusStore(db)


# -- what a path is ------------------------------------------------------------------------


@pytest.mark.parametrize("lite_mode", ["server", "embedded"])
def test_parent_that_is_a_file_is_a_clear_error(dbdir: Path, monkeypatch: pytest.MonkeyPatch, lite_mode: str) -> None:
    monkeypatch.setenv(lite_settings.ENV_MODE, lite_mode)
    (dbdir / "notes").write_text("a file")
    with pytest.raises(StoreError) as ei:
        MilvusStore(str(dbdir / "notes" / "m.db"), dimension=DIM)
    msg = str(ei.value)
    assert "\n" not in msg and "Errno" not in msg
    assert f"{dbdir / 'notes'} is a file, not a directory" in msg


def test_empty_path_of_the_wrong_kind_is_named_for_what_it_is(dbdir: Path) -> None:
    path = dbdir / "m.db"
    if LITE_MAJOR >= 3:
        path.write_bytes(b"")
        expected = "is an empty file, not a Milvus Lite database"
    else:
        path.mkdir()
        expected = "is an empty directory, not a Milvus Lite database"
    with pytest.raises(StoreError) as ei:
        MilvusStore(str(path), dimension=DIM)
    msg = str(ei.value)
    assert "\n" not in msg and expected in msg and "3.x database directory" not in msg
    assert lite_state.read_state(str(path)) is None


@pytest.mark.skipif(os.geteuid() != 0, reason="squatting a directory as another user needs root")
def test_a_squatted_socket_dir_falls_back_to_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another user created memsearch-<uid> in the shared temp dir first: the user's home serves,
    and when nothing serves the error names the way out."""
    import shutil
    import tempfile

    shared = tmp_path / "tmp"
    squat = shared / f"memsearch-{os.geteuid()}"
    squat.mkdir(parents=True)
    os.chown(squat, 65534, 65534)
    home = Path(tempfile.mkdtemp(prefix="msh-", dir="/tmp"))  # short: a socket path holds ~107 bytes
    try:
        _squatted(tmp_path, shared, squat, home, monkeypatch)
    finally:
        shutil.rmtree(home)


def _squatted(tmp_path: Path, shared: Path, squat: Path, home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import tempfile

    monkeypatch.setattr(lite_sockets, "SHARED_TMP", shared)
    monkeypatch.setattr(tempfile, "tempdir", str(shared))
    monkeypatch.setenv("HOME", str(home))
    sock = lite_sockets.socket_path(str(tmp_path / "m.db"), 123)
    assert Path(sock).parent == home / ".memsearch" / "run"
    assert stat.S_IMODE(os.stat(Path(sock).parent).st_mode) == 0o700
    assert lite_sockets.runtime_dir() == home / ".memsearch" / "run"

    (home / ".memsearch" / "run").rmdir()
    (home / ".memsearch" / "run").symlink_to(squat)
    with pytest.raises(StoreUnavailableError) as err:
        lite_sockets.runtime_dir()
    assert "MEMSEARCH_LITE_MODE=embedded" in str(err.value) and "TMPDIR" in str(err.value)


@pytest.mark.skipif(os.geteuid() != 0, reason="a database of another user needs root to make")
def test_a_database_another_user_made_first_is_refused(dbdir: Path, tmp_path: Path) -> None:
    """In a shared directory another user creates the database first: indexing into it
    would hand them the notes, and their rows would come up in searches. The CLI refuses
    it in one line, and the file stays as it was."""
    from tests.helpers.cli import make_env, one_line_error, run

    db = dbdir / "memsearch-demo.db"
    store = MilvusStore(str(db), dimension=DIM)
    store.close()
    lite_broker.stop_server(str(db))
    os.chown(db, 65534, 65534)
    before = db.stat()
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "a.md").write_text("# Secret\n\nThe vault code is 4242.\n", encoding="utf-8")
    env = make_env(tmp_path / "home")
    for args in (["index", str(notes)], ["search", "vault code"]):
        line = one_line_error(run([*args, "--milvus-uri", str(db)], env, timeout=120), "another user (uid 65534, ")
        assert str(db) in line
    after = db.stat()
    assert (after.st_size, after.st_mtime_ns, after.st_uid) == (before.st_size, before.st_mtime_ns, 65534)
    assert lite_state.read_state(str(db)) is None  # no server started on it


@pytest.mark.slow(reason="three CLI processes with the real model share one server")
def test_clients_with_other_temp_dirs_share_the_live_server(dbdir: Path, tmp_path: Path, model_dir: Path) -> None:
    """The server's socket lies under the $TMPDIR of the client that started it; a client
    with another one (or none, as an MCP host starts its servers) finds it through the
    record instead of taking the live server for dead, killing it and starting its own."""
    import shutil
    import tempfile

    from tests.helpers.cli import make_env, ok, run

    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "a.md").write_text("# Gateway\n\nThe falcon gateway listens on port 4242.\n", encoding="utf-8")
    db = dbdir / "m.db"
    own = Path(tempfile.mkdtemp(prefix="mst-", dir="/tmp"))  # short: a socket path holds ~107 bytes
    try:
        first = make_env(tmp_path / "home")
        first["TMPDIR"] = str(own)
        other = {k: v for k, v in first.items() if k != "TMPDIR"}  # the system's /tmp
        args = ["--milvus-uri", str(db), "-m", str(model_dir)]
        ok(run(["index", str(notes), *args], first))
        pid = lite_state.read_state(str(db))["pid"]
        assert str(own) in lite_state.read_state(str(db))["address"]
        for env in (other, first, other):
            hits = json.loads(ok(run(["search", "which port does the falcon gateway use", "-j", *args], env)).stdout)
            assert "4242" in hits[0]["content"]
            assert lite_state.read_state(str(db))["pid"] == pid and pid_alive(pid), "the live server was replaced"
    finally:
        lite_broker.stop_server(str(db))
        shutil.rmtree(own, ignore_errors=True)
