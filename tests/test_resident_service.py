"""The database's one resident service: its watched roots, leases and model.

A real detached Lite server, real onnxruntime on the shared model, real files
and real processes holding leases.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from memsearch_fast.lite import state as lite_state
from memsearch_fast.serve import client
from tests.helpers.harness import ids_by_source
from tests.helpers.lease import lease
from tests.helpers.watcher import Watcher

pytestmark = pytest.mark.skipif(os.name != "posix", reason="the shared server is POSIX-only")


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """This process and the servers it starts: a HOME of their own, short leases and idle timeout."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("MEMSEARCH_OFFLINE", "1")
    monkeypatch.setenv("MEMSEARCH_WATCH_LEASE_S", "6")
    monkeypatch.setenv("MEMSEARCH_LITE_IDLE_TIMEOUT", "4")
    for k in ("MEMSEARCH_LITE_MODE", "MEMSEARCH_SEARCH_SERVICE", "MEMSEARCH_SEARCH_UNLOAD_S"):
        monkeypatch.delenv(k, raising=False)
    (tmp_path / "home").mkdir()


def wait_for(what: Callable[[], Any], timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = what()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError("timed out")
        time.sleep(0.2)


def roots(db: Path) -> list[dict[str, Any]]:
    st = client.status(str(db))
    return list(st["roots"]) if st else []


def search(db: Path, model_dir: Path, query: str) -> list[dict[str, Any]]:
    argv = ["search", query, "-j", "--collection", "notes", "--milvus-uri", str(db), "-m", str(model_dir)]
    out = subprocess.run(
        [sys.executable, "-m", "memsearch_fast.cli", *argv],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return list(json.loads(out.stdout))


def status_cli(db: Path, *flags: str) -> Any:
    out = subprocess.run(
        [sys.executable, "-m", "memsearch_fast.cli", "status", "--milvus-uri", str(db), *flags],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout) if flags else out.stdout


def test_status_without_a_service(served, db):
    assert status_cli(db, "-j") == {"database": str(db), "running": False}
    assert status_cli(db).strip() == f"No service running for {db}."
    assert not lite_state.read_state(str(db)) and not db.exists()  # nothing started or created


@pytest.mark.slow(reason="starts the resident service and waits on its leases and idle timeout")
def test_registered_roots_are_watched_once_and_indexed_with_the_services_model(
    served, db, model_dir, tmp_path, monkeypatch
):
    # Leases long enough to outlive the two searches and runs below on a slow machine (lapsing
    # has its own test): with 6 s, "lease one" could lapse before the status was read.
    monkeypatch.setenv("MEMSEARCH_WATCH_LEASE_S", "120")
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "a.md").write_text("# Gateway\n\nThe falcon gateway listens on port 4242.\n", encoding="utf-8")
    first = client.send_lease(str(db), lease(model_dir, notes, "one", os.getpid()), start=True)
    assert first and first["ok"] and first["added"] == [str(notes)]
    second = client.send_lease(str(db), lease(model_dir, notes, "two", None), start=False)
    assert second and second["ok"] and second["added"] == []  # the same root: watched once
    [root] = wait_for(lambda: [r for r in roots(db) if r["runs"]])
    assert {x["holder"] for x in root["leases"]} == {"one", "two"}
    # A search naming the model through a symlink borrows the model the leases loaded.
    link = tmp_path / "model-link"
    link.symlink_to(model_dir.resolve(), target_is_directory=True)
    assert "4242" in search(db, link, "which port does the falcon gateway use")[0]["content"]

    (notes / "b.md").write_text("# Cache\n\nThe otter cache expires after ninety seconds.\n", encoding="utf-8")
    wait_for(lambda: roots(db)[0]["runs"] >= 2)
    assert "otter" in search(db, model_dir.resolve(), "when does the otter cache expire")[0]["content"]
    st = client.status(str(db))
    assert st is not None and [m["dir"] for m in st["models"]] == [str(model_dir.resolve())]  # one model
    shown = status_cli(db, "-j")
    assert shown["running"] and shown["pid"] == lite_state.read_state(str(db))["pid"] and shown["rss_mb"] > 0
    assert shown["rss_mb"] == pytest.approx(shown["server_rss_mb"] + shown["engine_rss_mb"], abs=0.2)
    assert shown["server_rss_mb"] > 0 and shown["engine_rss_mb"] > 0
    assert shown["uptime_s"] >= 0 and shown["queue"] == 0 and len(shown["models"]) == 1
    [root] = shown["roots"]
    assert root["root"] == str(notes) and root["collection"] == "notes" and root["last_run"]["embedded"] == 1
    assert sorted((x["holder"], x["pid"]) for x in root["leases"]) == [("one", os.getpid()), ("two", None)]
    text = status_cli(db)
    assert f"pid {shown['pid']}" in text and str(notes) in text and "lease one" in text
    assert "(service " in text and " MB, engine " in text  # each process's share said

    assert client.release(str(db), "one")
    assert [x["holder"] for x in roots(db)[0]["leases"]] == ["two"]  # the other lease keeps it
    assert client.release(str(db), "two")
    wait_for(lambda: not roots(db), timeout=10)


@pytest.mark.slow(reason="starts the resident service, searches through it and waits out its idle timeout")
def test_after_its_last_lease_and_search_the_service_and_its_engine_exit_within_the_idle_timeout(
    served, db, model_dir, tmp_path
):
    """A session as the hooks run it: a lease, a search, the release. The service's own
    connections to its engine (its watcher's run, its search) are no clients: it and
    its engine go within the idle timeout (4 s) and 5 s."""
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "a.md").write_text("# Gateway\n\nThe falcon gateway listens on port 4242.\n", encoding="utf-8")
    assert client.send_lease(str(db), lease(model_dir, notes, "session", os.getpid()), start=True)["ok"]
    wait_for(lambda: [r for r in roots(db) if r["runs"]])
    assert "4242" in search(db, model_dir, "which port does the falcon gateway use")[0]["content"]
    record = lite_state.read_state(str(db))
    server, engine = record["pid"], record.get("engine_pid")
    assert client.release(str(db), "session")
    deadline = time.monotonic() + 4 + 5
    while time.monotonic() < deadline and os.path.exists(f"/proc/{server}"):
        time.sleep(0.2)
    assert not os.path.exists(f"/proc/{server}"), "the service outlived its idle timeout"
    assert engine is None or not os.path.exists(f"/proc/{engine}")
    assert lite_state.read_state(str(db)) is None


@pytest.mark.slow(reason="starts the resident service and waits on its leases and idle timeout")
def test_a_lease_lapses_with_its_holder_or_without_renewal(served, db, model_dir, tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        assert client.send_lease(str(db), lease(model_dir, a, "killed", holder.pid), start=True)["ok"]
        assert client.send_lease(str(db), lease(model_dir, b, "quiet", None), start=False)["ok"]
        assert len(roots(db)) == 2
        holder.send_signal(signal.SIGKILL)
        holder.wait()
        wait_for(lambda: [r["root"] for r in roots(db)] == [str(b)], timeout=10)  # its pid is gone
        for _ in range(3):  # renewed: kept past the lease's 6 s
            time.sleep(2.5)
            assert client.send_lease(str(db), lease(model_dir, b, "quiet", None), start=False)["ok"]
        assert [r["root"] for r in roots(db)] == [str(b)]
        wait_for(lambda: not roots(db), timeout=15)  # no renewal: lapsed
    finally:
        holder.kill()
        holder.wait()
    gone = client.send_lease(str(db), lease(model_dir, a, "x", holder.pid), start=False)
    assert gone and "not running" in gone["error"]


@pytest.mark.slow(reason="renews a lease past the idle timeout, then waits for the exit")
def test_the_service_stays_while_a_lease_lives_then_exits_idle(served, db, model_dir, tmp_path):
    notes = tmp_path / "notes"
    notes.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        assert client.send_lease(str(db), lease(model_dir, notes, "s", holder.pid), start=True)["ok"]
        pid = lite_state.read_state(str(db))["pid"]
        for _ in range(4):  # well past the 4 s idle timeout, renewed within the lease
            time.sleep(2.5)
            assert client.send_lease(str(db), lease(model_dir, notes, "s", holder.pid), start=False)["ok"]
        assert lite_state.read_state(str(db))["pid"] == pid
        holder.kill()
        holder.wait()
        wait_for(lambda: lite_state.read_state(str(db)) is None, timeout=30)
        wait_for(lambda: not os.path.exists(f"/proc/{pid}"), timeout=10)
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.slow(reason="starts the resident service and waits on its leases and idle timeout")
def test_a_killed_service_is_restarted_by_the_next_lease(served, db, model_dir, tmp_path):
    notes = tmp_path / "notes"
    notes.mkdir()
    assert client.send_lease(str(db), lease(model_dir, notes, "s", os.getpid()), start=True)["ok"]
    pid = lite_state.read_state(str(db))["pid"]
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not os.path.exists(f"/proc/{pid}"), timeout=10)
    assert client.status(str(db)) is None
    assert client.send_lease(str(db), lease(model_dir, notes, "s", os.getpid()), start=False) is None
    again = client.send_lease(str(db), lease(model_dir, notes, "s", os.getpid()), start=True)
    assert again and again["added"] == [str(notes)]
    assert lite_state.read_state(str(db))["pid"] != pid
    (notes / "n.md").write_text("# Note\n\nThe heron queue drains every night.\n", encoding="utf-8")
    wait_for(lambda: any(r["last_run"] and r["last_run"].get("changed") for r in roots(db)))
    assert "heron" in search(db, model_dir, "when does the heron queue drain")[0]["content"]


@pytest.mark.slow(reason="starts the resident service on a cold root of 1 MB and stops it during its run")
def test_sigterm_stops_the_service_within_seconds_and_keeps_what_its_run_embedded(served, db, model_dir, tmp_path):
    """A watcher's run in hand is cancelled as Ctrl-C cancels ``index``: the service does not
    wait out a cold run (before: up to 30 s, past the 10 s a stopper gives before kill -9)."""
    from tests.helpers.harness import corpus

    notes = tmp_path / "notes"
    files = corpus(notes, 1_000_000, seed=29)
    assert client.send_lease(str(db), lease(model_dir, notes, "s", os.getpid()), start=True)["ok"]
    pid = lite_state.read_state(str(db))["pid"]
    # Stopped once the run has embedded a batch (what is embedded is written as it stops),
    # long before the run could end: a fixed sleep found nothing embedded on a loaded machine.
    run = wait_for(lambda: next((r["run"] for r in roots(db) if r["run"] and r["run"]["embedded"]), None), 120)
    assert run["read"] <= run["files"] == len(files) and run["embedded"] <= run["queued"]
    assert f"of {len(files)} files read" in status_cli(db)  # as `memsearch status` says it
    os.kill(pid, signal.SIGTERM)
    asked = time.monotonic()
    wait_for(lambda: not os.path.exists(f"/proc/{pid}"), timeout=60)
    took = time.monotonic() - asked
    assert took < 8, f"the service took {took:.1f} s to stop"
    kept = ids_by_source(db, "notes")
    assert kept and len(kept) < len(files), (len(kept), len(files))  # written, and the run was cut


def watch_cli(db: Path, model_dir: Path, root: Path, **env: str) -> Watcher:
    args = [str(root), "--collection", "notes", "--milvus-uri", str(db), "-m", str(model_dir)]
    return Watcher(args, {**os.environ, **env})


def loads_onnxruntime(pid: int) -> bool:
    return "onnxruntime" in Path(f"/proc/{pid}/maps").read_text(encoding="utf-8", errors="replace")


def leases_of(db: Path) -> list[str]:
    return sorted(x["holder"] for r in roots(db) for x in r["leases"])


@pytest.mark.slow(reason="starts the resident service and waits on its leases and idle timeout")
def test_memsearch_watch_joins_the_services_watcher(served, db, model_dir, tmp_path, monkeypatch):
    """`memsearch watch` registers its root with the service and prints the service's
    runs as its own: no second watcher, no second model, and Ctrl-C unregisters."""
    monkeypatch.setenv("MEMSEARCH_WATCH_LEASE_S", "120")
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "a.md").write_text("# Gateway\n\nThe falcon gateway listens on port 4242.\n", encoding="utf-8")
    assert client.send_lease(str(db), lease(model_dir, notes, "s", os.getpid()), start=True)["ok"]
    wait_for(lambda: roots(db) and roots(db)[0]["runs"])
    w = watch_cli(db, model_dir, notes)
    try:
        started = w.next("watching")
        assert started["pid"] == w.proc.pid and started["service"] == str(db)
        assert w.next("indexed")["files"] == 1  # it joined a watcher that had run: one more run, for it to see
        [session, own] = leases_of(db)
        assert session == "s" and own.startswith(f"watch:{w.proc.pid}:") and len(roots(db)) == 1
        (notes / "b.md").write_text("# Cache\n\nThe otter cache expires after ninety seconds.\n", encoding="utf-8")
        assert w.next("indexed", timeout=60)["changed"] == 1
        assert "otter" in search(db, model_dir, "when does the otter cache expire")[0]["content"]
        assert not loads_onnxruntime(w.proc.pid)  # the service's model did the work
        assert len(client.status(str(db))["models"]) == 1

        second = watch_cli(db, model_dir, notes)  # the same paths again: nothing to do
        assert second.next("already_running")["pid"] == w.proc.pid
        assert second.wait() == 0

        # Switched off, a watch runs in its own process; the service holds the root's watcher lock.
        own = watch_cli(db, model_dir, notes, MEMSEARCH_WATCH_SERVICE="0")
        busy = own.next("already_running")
        assert busy["pid"] == lite_state.read_state(str(db))["pid"] and busy["roots"] == [str(notes)]
        assert own.wait() == 0

        # And the other way round: a root that a watch of its own holds is not joined.
        other = tmp_path / "other"
        other.mkdir()
        alone = watch_cli(db, model_dir, other, MEMSEARCH_WATCH_SERVICE="0")
        try:
            assert alone.next("watching")["pid"] == alone.proc.pid
            joined = watch_cli(db, model_dir, other)
            assert joined.next("already_running")["pid"] == alone.proc.pid
            assert joined.wait() == 0
        finally:
            assert alone.stop() == 0
    finally:
        assert w.stop() == 0
    assert w.next("stopped")["reason"] == "stopped"
    wait_for(lambda: leases_of(db) == ["s"], timeout=10)  # unregistered; the session's lease keeps the root


@pytest.mark.slow(reason="starts the resident service and waits on its leases and idle timeout")
def test_memsearch_watch_outlives_a_killed_service_and_a_killed_watch_lets_go(served, db, model_dir, tmp_path):
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "a.md").write_text("# Note\n\nThe heron queue drains every night.\n", encoding="utf-8")
    w = watch_cli(db, model_dir, notes)
    try:
        assert w.next("indexed")["embedded"] == 1  # it started the service itself
        pid = lite_state.read_state(str(db))["pid"]
        os.kill(pid, signal.SIGKILL)
        assert "went away" in w.next("error", timeout=30)["error"]
        (notes / "b.md").write_text("# Kiln\n\nThe kiln job runs at dawn.\n", encoding="utf-8")
        again = w.next("indexed", timeout=90)  # a new service, the same root, what changed meanwhile
        assert again["changed"] >= 1 and lite_state.read_state(str(db))["pid"] != pid
        assert "kiln" in search(db, model_dir, "when does the kiln job run")[0]["content"]
        [own] = leases_of(db)
        assert own.startswith(f"watch:{w.proc.pid}:")
        w.proc.kill()  # kill -9: its connection closes, its lease goes at once
        w.wait()
        wait_for(lambda: not roots(db), timeout=10)
    finally:
        w.stop()


def load_state(db: Path, name: str) -> str:
    from pymilvus import MilvusClient

    st = lite_state.read_state(str(db))
    assert st is not None
    c = MilvusClient(uri=st["uri"])
    try:
        return str(c.get_load_state(name)["state"].name)
    finally:
        c.close()


@pytest.mark.slow(reason="starts the resident service and waits on its leases and idle timeout")
def test_the_engine_releases_what_nobody_uses(served, db, model_dir, tmp_path, monkeypatch):
    """Milvus Lite holds a loaded collection whole in the engine (about 50 MB each): the service
    releases a collection once idle (MEMSEARCH_ENGINE_IDLE_S), never one that a run is writing; the
    next search loads it again by itself and answers as before. (Its spans are in the span file.)"""
    from memsearch_fast.store.manifest import Manifest, manifest_path

    monkeypatch.setenv("MEMSEARCH_ENGINE_IDLE_S", "2")
    monkeypatch.setenv("MEMSEARCH_WATCH_LEASE_S", "120")
    monkeypatch.setenv("MEMSEARCH_LITE_IDLE_TIMEOUT", "120")
    notes = tmp_path / "notes"
    notes.mkdir()
    bullets = "".join(f"- The heron job {i} ran on node {i} of the blue rack.\n" for i in range(30))
    (notes / "a.md").write_text(f"# Jobs\n\n{bullets}- The falcon gateway listens on port 4242.\n", "utf-8")
    assert client.send_lease(str(db), lease(model_dir, notes, "one", os.getpid()), start=True)
    wait_for(lambda: [r for r in roots(db) if r["runs"]])
    assert "4242" in search(db, model_dir, "which port does the falcon gateway use")[0]["content"]
    assert load_state(db, "notes_spans") == "NotExist"  # the spans are in the span file, not the engine
    wait_for(lambda: load_state(db, "notes") == "NotLoad", 30)
    assert "4242" in search(db, model_dir, "which port does the falcon gateway use")[0]["content"]
    assert load_state(db, "notes") == "Loaded"
    st = status_cli(db, "-j")
    assert st["release"]["idle_s"] == 2 and st["release"]["released"] >= 1
    assert "collections released after 2 s idle or past 3 loaded" in status_cli(db)

    # A run holding the writer lock keeps its collection loaded, however idle the service is.
    with Manifest(manifest_path(str(db), "notes")).writer():
        time.sleep(8)  # several looks, each past the idle time
        assert load_state(db, "notes") == "Loaded"
    wait_for(lambda: load_state(db, "notes") == "NotLoad", 30)


@pytest.mark.slow(reason="starts the resident service and waits on its leases and idle timeout")
def test_past_the_cap_the_least_recently_used_collection_is_released(served, db, model_dir, tmp_path, monkeypatch):
    """MEMSEARCH_ENGINE_LOADED caps the collections kept loaded: searching a second project
    releases the first's (used longest ago) within seconds, long before the idle time."""
    monkeypatch.setenv("MEMSEARCH_ENGINE_LOADED", "1")
    monkeypatch.setenv("MEMSEARCH_WATCH_LEASE_S", "120")
    monkeypatch.setenv("MEMSEARCH_LITE_IDLE_TIMEOUT", "120")
    for name in ("notes", "other"):
        root = tmp_path / name
        root.mkdir()
        (root / "a.md").write_text(f"# Gateway\n\nThe {name} gateway listens on port 4242.\n", encoding="utf-8")
        assert client.send_lease(str(db), lease(model_dir, root, name, os.getpid(), collection=name), start=True)
    wait_for(lambda: len([r for r in roots(db) if r["runs"]]) == 2)
    assert "4242" in search(db, model_dir, "which port does the notes gateway use")[0]["content"]
    argv = ["search", "which port", "-j", "--collection", "other", "--milvus-uri", str(db), "-m", str(model_dir)]
    out = subprocess.run([sys.executable, "-m", "memsearch_fast.cli", *argv], capture_output=True, text=True)
    assert out.returncode == 0 and "other gateway" in out.stdout
    wait_for(lambda: load_state(db, "notes") == "NotLoad", 30)
    assert load_state(db, "other") == "Loaded"
    # MEMSEARCH_ENGINE_IDLE_S=0 turns off the idle rule alone: the cap still holds.
    monkeypatch.setenv("MEMSEARCH_ENGINE_IDLE_S", "0")
    from memsearch_fast.serve.keeper import Keeper

    k = Keeper.from_env("unix:/nowhere", str(db), lambda _c: False).start()
    try:
        assert (k.idle_s, k.loaded) == (0.0, 1) and k._thread.is_alive()  # it looks, for the cap
    finally:
        k.stop()


def index_cli(db: Path, model_dir: Path, root: Path, *flags: str, **env: str) -> subprocess.CompletedProcess[str]:
    argv = ["index", str(root), "-j", "--collection", "notes", "--milvus-uri", str(db), "-m", str(model_dir), *flags]
    return subprocess.run(
        [sys.executable, "-m", "memsearch_fast.cli", *argv],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **env},
    )


def index_runs(db: Path) -> int:
    st = client.status(str(db))
    assert st is not None
    return int(st["index_runs"])


@pytest.mark.slow(reason="starts the resident service and waits on its leases and idle timeout")
def test_memsearch_index_runs_in_the_service_that_holds_the_model(served, db, model_dir, tmp_path, monkeypatch):
    """Where the service has the model loaded, `memsearch index` hands it the run
    (no second model); the output, the report and the rows are an in-process run's."""
    monkeypatch.setenv("MEMSEARCH_LITE_IDLE_TIMEOUT", "120")
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "a.md").write_text("# Gateway\n\nThe falcon gateway listens on port 4242.\n", encoding="utf-8")
    first = index_cli(db, model_dir, notes)  # no model loaded anywhere yet: this process loads it
    assert first.returncode == 0, first.stderr[-2000:]
    assert index_runs(db) == 0 and client.status(str(db))["models"] == []
    assert "4242" in search(db, model_dir, "which port does the falcon gateway use")[0]["content"]

    (notes / "b.md").write_text("# Cache\n\nThe otter cache expires after ninety seconds.\n", encoding="utf-8")
    (notes / "c.md").write_bytes(b"# Broken\n\n\xff\xfe not utf-8 \xff\n")
    second = index_cli(db, model_dir, notes)
    assert second.returncode == 0, second.stderr[-2000:]
    report = json.loads(second.stdout)
    assert index_runs(db) == 1  # the service ran it
    assert report["changed"] == 2 and report["embedded"] == 2 and report["files"] == 3
    assert [Path(p).name for p in report["invalid_utf8"]] == ["c.md"] and "invalid UTF-8" in second.stderr
    assert "otter" in search(db, model_dir, "when does the otter cache expire")[0]["content"]
    assert len(client.status(str(db))["models"]) == 1

    (notes / "a.md").write_text("# Gateway\n\nThe falcon gateway now listens on port 5151.\n", encoding="utf-8")
    own = index_cli(db, model_dir, notes, MEMSEARCH_INDEX_SERVICE="0")  # switched off: in this process
    assert own.returncode == 0 and json.loads(own.stdout)["changed"] == 1 and index_runs(db) == 1
    forced = index_cli(db, model_dir, notes, "--force")
    assert forced.returncode == 0 and index_runs(db) == 2
    assert json.loads(forced.stdout)["embedded"] == 3  # --force embeds every chunk again, as in process

    fresh = tmp_path / "fresh.db"
    try:
        assert index_cli(fresh, model_dir, notes).returncode == 0
        assert ids_by_source(db, "notes") == ids_by_source(fresh, "notes")
    finally:
        from memsearch_fast.lite import broker

        broker.stop_server(str(fresh))


def _embedding_in_the_service(db: Path, model_dir: Path, notes: Path) -> subprocess.Popen[str]:
    """A `memsearch index` of 200 KB that the service (its model loaded by a search) runs,
    once its progress shows chunks being embedded."""
    from tests.helpers.corpus import write_corpus

    (notes / "a.md").parent.mkdir()
    (notes / "a.md").write_text("# A\n\nalpha\n", encoding="utf-8")
    assert index_cli(db, model_dir, notes).returncode == 0
    search(db, model_dir, "alpha")  # the service loads the model
    write_corpus(notes / "more", total_bytes=200_000, seed=3)
    argv = ["index", str(notes), "-j", "--collection", "notes", "--milvus-uri", str(db), "-m", str(model_dir)]
    proc = subprocess.Popen(
        [sys.executable, "-m", "memsearch_fast.cli", *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert proc.stderr is not None
    for line in proc.stderr:  # progress as JSON lines
        if line.startswith("{") and json.loads(line).get("embedded", 0) > 0:
            return proc
    raise AssertionError("no chunk was embedded")


@pytest.mark.slow(reason="indexes 200 KB in the service to interrupt it mid-run")
def test_an_index_run_in_the_service_is_interrupted_as_in_process(served, db, model_dir, tmp_path, monkeypatch):
    """SIGTERM (or Ctrl-C) of a `memsearch index` that the service runs: the service
    writes and flushes what was embedded, the CLI exits 130; the next run finishes it."""
    monkeypatch.setenv("MEMSEARCH_LITE_IDLE_TIMEOUT", "120")
    monkeypatch.setenv("MEMSEARCH_SPANS", "0")  # the interrupt is what this is about: spans triple the embedding
    notes = tmp_path / "notes"
    proc = _embedding_in_the_service(db, model_dir, notes)
    proc.send_signal(signal.SIGTERM)
    _, errors = proc.communicate(timeout=120)
    assert proc.returncode == 130, errors[-2000:]
    assert "interrupted; what was written is kept" in errors
    assert index_runs(db) == 1  # the first run (in process) is not counted; this one ran in the service
    again = index_cli(db, model_dir, notes)
    assert again.returncode == 0, again.stderr[-2000:]
    done = json.loads(again.stdout)
    assert done["embedded"] < done["chunks"]  # what the interrupted run wrote is not embedded again


@pytest.mark.slow(reason="starts the resident service and waits on its leases and idle timeout")
def test_an_index_run_cancelled_while_it_waits_for_the_writer_lets_the_lock_go(
    served, db, model_dir, tmp_path, monkeypatch
):
    """A client that gives up while its run in the service waits for another writer:
    the service must not take the writer lock later and keep it."""
    from memsearch_fast.store.manifest import Manifest

    monkeypatch.setenv("MEMSEARCH_LITE_IDLE_TIMEOUT", "120")
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "a.md").write_text("# A\n\nalpha\n", encoding="utf-8")
    assert index_cli(db, model_dir, notes).returncode == 0
    search(db, model_dir, "alpha")  # the service loads the model
    (notes / "b.md").write_text("# B\n\nbeta\n", encoding="utf-8")
    writer = Manifest.for_store(str(db), "notes")
    writer.acquire()
    try:
        argv = ["index", str(notes), "-q", "--collection", "notes", "--milvus-uri", str(db), "-m", str(model_dir)]
        proc = subprocess.Popen([sys.executable, "-m", "memsearch_fast.cli", *argv], stderr=subprocess.PIPE, text=True)
        assert proc.stderr is not None
        assert "waiting for it to finish" in proc.stderr.readline()  # said by the service's run
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 130
        proc.stderr.close()
    finally:
        writer.release()
    again = index_cli(db, model_dir, notes)  # through the service: its queue is free
    assert again.returncode == 0, again.stderr[-2000:]
    assert json.loads(again.stdout)["changed"] == 1
    own = index_cli(db, model_dir, notes, MEMSEARCH_INDEX_SERVICE="0")  # and the lock is free for others
    assert own.returncode == 0 and json.loads(own.stdout)["changed"] == 0


def test_index_runs_take_turns_per_collection_not_per_service(tmp_path: Path) -> None:
    """A long run of one project's collection (a ``memsearch index`` handed over)
    does not hold up another collection's runs (another project's watcher); two
    runs of one collection still go one after the other."""
    import asyncio

    from memsearch_fast.serve.models import Models
    from memsearch_fast.serve.watchers import Registry

    registry = Registry(str(tmp_path / "m.db"), Models(unload_after=60), touch=lambda: None).start()
    log: list[str] = []
    try:

        async def run(name: str, collection: str, hold: asyncio.Event | None) -> None:
            async with registry.turn(collection):
                log.append(f"{name} in")
                if hold is not None:
                    await hold.wait()
                log.append(f"{name} out")

        release = registry._call(_event())
        long = registry.submit(run("long", "project_a", release))
        registry._call(asyncio.sleep(0.2))
        other = registry.submit(run("other", "project_b", None))
        same = registry.submit(run("same", "project_a", None))
        registry._call(asyncio.wait_for(_done(other), 5))
        assert log == ["long in", "other in", "other out"]  # project_b's run did not wait; "same" waits
        assert registry.describe()["queue"] == 1
        registry._loop.call_soon_threadsafe(release.set)
        registry._call(asyncio.wait_for(_done(same), 5))
        assert log[3:] == ["long out", "same in", "same out"]
        assert long.done()
    finally:
        registry.stop()


async def _event() -> Any:
    import asyncio

    return asyncio.Event()


async def _done(task: Any) -> None:
    import asyncio

    await asyncio.wait([task])


@pytest.mark.slow(reason="starts the resident service")
def test_a_lease_cannot_ask_to_last_for_ever(served, db, model_dir, tmp_path):
    """A lease without a pid lives by its seconds alone: one asking for ever (or for years)
    would keep the service up for good, so it gets at most an hour between renewals."""
    from memsearch_fast.serve.leases import MAX_LEASE_S

    notes = tmp_path / "notes"
    notes.mkdir()
    for asked, got in ((float("inf"), 6.0), (1e12, MAX_LEASE_S), ("soon", 6.0), (30, 30.0)):
        reply = client.send_lease(str(db), {**lease(model_dir, notes, "h", None), "ttl": asked}, start=True)
        assert reply is not None and reply["ok"] and reply["lease_s"] == got, (asked, reply)
        [root] = roots(db)
        assert root["leases"][0]["expires_in"] <= got
    assert client.release(str(db), "h")
