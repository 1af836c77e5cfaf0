"""Searches answered by the database's server (:mod:`memsearch_fast.serve.search`).

Real `memsearch` subprocesses, a real detached Lite server, the real model.
The fast path must print exactly what a search run in the CLI process prints,
and step aside whenever it cannot.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from memsearch_fast.lite import process as lite_process
from memsearch_fast.lite import sockets as lite_sockets
from memsearch_fast.lite import state as lite_state
from memsearch_fast.serve import search as search_service

pytestmark = pytest.mark.skipif(os.name != "posix", reason="the shared server is POSIX-only")


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    root = tmp_path / "notes"
    root.mkdir()
    (root / "2026-01-02.md").write_text(
        "# Jan 2\n\n## 09:10\n\nThe sierra staging gateway listens on port 20000.\n\n"
        "## 11:30\n\nWe picked libvips for thumbnails after the benchmark.\n",
        encoding="utf-8",
    )
    (root / "2026-01-03.md").write_text(
        "# Jan 3\n\n## 14:00\n\nDatabase migrations take an advisory lock; the timeout is 30 s.\n",
        encoding="utf-8",
    )
    return root


def cli(env: dict[str, str], db: Path, model_dir: Path | None, *args: str, importtime: bool = False):
    pre = ["-X", "importtime"] if importtime else []
    model = ["-m", str(model_dir)] if model_dir is not None else []
    return subprocess.run(
        [sys.executable, *pre, "-m", "memsearch_fast.cli", *args, "--milvus-uri", str(db), *model],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _said(stderr: str, db: Path) -> str:
    """What a CLI said besides its import times, and the end of its server's log."""
    lines = [line for line in stderr.splitlines() if not line.startswith("import time")]
    log = Path(f"{db}.server.log")
    tail = log.read_text(encoding="utf-8", errors="replace")[-1500:] if log.is_file() else "(no server log)"
    return "\n".join(lines[-20:]) + "\n-- server log --\n" + tail


def imported(stderr: str, module: str) -> bool:
    return any(line.rstrip().endswith(f"| {module}") for line in stderr.splitlines() if line.startswith("import time"))


@pytest.mark.slow(reason="starts the search service through the CLI and waits on it")
def test_search_is_answered_by_the_server_exactly_as_in_process(env, db, model_dir, corpus):
    assert cli(env, db, model_dir, "index", str(corpus), "-q").returncode == 0
    st = lite_state.read_state(str(db))
    assert st and st["search"].endswith("-search.sock")
    for flags in (
        ["-j"],
        ["-j", "-k", "2", "--explain"],
        ["--digest"],
        ["-j", "--source-prefix", str(corpus)],
        ["--budget", "30", "-j"],  # counted with the model's tokenizer, in the server
        ["--min-score", "0.9"],
    ):
        fast = cli(env, db, model_dir, "search", "which port does the gateway listen on", *flags, importtime=True)
        assert fast.returncode == 0, fast.stderr[-2000:]
        assert not imported(fast.stderr, "pymilvus") and not imported(fast.stderr, "onnxruntime")
        # Switched off: this process searches by itself.
        own = cli(dict(env, MEMSEARCH_SEARCH_SERVICE="0"), db, model_dir, "search",
                  "which port does the gateway listen on", *flags, importtime=True)  # fmt: skip
        assert own.returncode == 0, own.stderr[-2000:]
        assert imported(own.stderr, "pymilvus")
        assert fast.stdout == own.stdout
        if flags == ["-j"]:
            hits = json.loads(fast.stdout)
            assert hits and "port 20000" in hits[0]["content"]
    # A search from another environment than the server's (another HOME): the model
    # is resolved by the searching process, so the server still answers it.
    other = dict(env, HOME=str(db.parent / "other-home"))
    os.mkdir(other["HOME"])
    out = cli(other, db, model_dir, "search", "which port does the gateway listen on", "-j", importtime=True)
    assert out.returncode == 0 and not imported(out.stderr, "pymilvus")
    assert json.loads(out.stdout) == hits


@pytest.mark.slow(reason="starts the search service through the CLI and waits on it")
def test_expand_and_stats_are_answered_by_the_service_exactly_as_in_process(env, db, model_dir, corpus):
    assert cli(env, db, model_dir, "index", str(corpus), "-q").returncode == 0
    hits = json.loads(cli(env, db, model_dir, "search", "which port does the gateway listen on", "-j").stdout)
    own_env = dict(env, MEMSEARCH_SEARCH_SERVICE="0")
    for args in (
        ["expand", hits[0]["chunk_hash"]],
        ["expand", hits[0]["chunk_hash"], "-j", "--no-section"],
        ["expand", hits[0]["chunk_hash"], "-n", "1"],
        ["stats"],
        ["stats", "-j"],
    ):
        model = model_dir if args[0] == "expand" else None  # stats takes no model
        fast = cli(env, db, model, *args, importtime=True)
        assert fast.returncode == 0 and not imported(fast.stderr, "pymilvus"), (args, fast.stderr[-2000:])
        own = cli(own_env, db, model, *args, importtime=True)
        assert own.returncode == 0 and imported(own.stderr, "pymilvus"), (args, own.stderr[-2000:])
        assert fast.stdout == own.stdout, args
    # An unknown chunk: this process answers, with its own error.
    unknown = cli(env, db, model_dir, "expand", "0123456789abcdef")
    assert unknown.returncode != 0 and "chunk not found: 0123456789abcdef" in unknown.stderr


@pytest.mark.slow(reason="starts the search service through the CLI and kills its engine")
def test_a_killed_engine_is_started_again_and_the_search_in_hand_answered(env, db, model_dir, corpus):
    """memsearch 0.4's hooks kill every Milvus Lite engine of the user: the server starts
    its engine again on the same socket, and the service answers the search it holds."""
    import signal

    env = dict(env, MEMSEARCH_DEBUG="1")  # a search left to the CLI says why
    query = ["search", "which port does the gateway listen on", "-j", "-k", "2"]
    assert cli(env, db, model_dir, "index", str(corpus), "-q").returncode == 0
    first = cli(env, db, model_dir, *query)
    st = lite_state.read_state(str(db))
    assert first.returncode == 0 and st is not None
    for kill in (1, 2):
        os.kill(st["engine_pid"], signal.SIGKILL)
        again = cli(env, db, model_dir, *query, importtime=True)
        assert again.returncode == 0 and not imported(again.stderr, "pymilvus"), (kill, _said(again.stderr, db))
        assert json.loads(again.stdout) == json.loads(first.stdout)
        now = lite_state.read_state(str(db))
        assert now is not None and now["pid"] == st["pid"] and now["engine_pid"] != st["engine_pid"]
        assert lite_process.pid_alive(now["engine_pid"])
        st = now
    # Writes go on: an edit indexed after the kill is found.
    (corpus / "2026-01-04.md").write_text("# Jan 4\n\n## 08:00\n\nThe quota service caps uploads at 7 GiB.\n")
    assert cli(env, db, model_dir, "index", str(corpus), "-q").returncode == 0
    hits = json.loads(cli(env, db, model_dir, "search", "upload quota cap", "-j", "-k", "1").stdout)
    assert "7 GiB" in hits[0]["content"]


@pytest.mark.slow(reason="starts the search service through the CLI and waits on it")
def test_the_default_model_is_answered_under_its_recorded_name(env, db, corpus):
    env = dict(env, MEMSEARCH_OFFLINE="1")  # the default model from its packaged checkpoint
    assert cli(env, db, None, "index", str(corpus), "-q").returncode == 0
    fast = cli(env, db, None, "search", "advisory lock timeout", "-j", "--explain", importtime=True)
    assert fast.returncode == 0 and not imported(fast.stderr, "pymilvus"), fast.stderr[-2000:]
    own = cli(dict(env, MEMSEARCH_SEARCH_SERVICE="0"), db, None, "search", "advisory lock timeout", "-j", "--explain")
    assert fast.stdout == own.stdout and "advisory lock" in json.loads(fast.stdout)[0]["content"]


@pytest.mark.slow(reason="starts the search service through the CLI and waits on it")
def test_server_answers_after_the_index_changes(env, db, model_dir, corpus):
    assert cli(env, db, model_dir, "index", str(corpus), "-q").returncode == 0
    before = json.loads(cli(env, db, model_dir, "search", "quokka feeding schedule", "-j", "-k", "1").stdout)
    assert "quokka" not in before[0]["content"]
    (corpus / "2026-01-04.md").write_text("# Jan 4\n\n## 08:00\n\nThe quokka feeding schedule is 7am.\n")
    assert cli(env, db, model_dir, "index", str(corpus), "-q").returncode == 0
    after = json.loads(cli(env, db, model_dir, "search", "quokka feeding schedule", "-j", "-k", "1").stdout)
    assert "quokka" in after[0]["content"]


@pytest.mark.slow(reason="starts the search service through the CLI and waits on it")
def test_missing_collection_and_bad_requests_leave_it_to_the_cli(env, db, model_dir, corpus):
    assert cli(env, db, model_dir, "index", str(corpus), "-q").returncode == 0
    out = cli(env, db, model_dir, "search", "x", "--collection", "ghost")
    assert out.returncode == 1
    assert (
        out.stderr.strip()
        == f"Error: collection 'ghost' does not exist at {db}; run 'memsearch index PATH' to build it"
    )
    path = lite_state.read_state(str(db))["search"][len("unix:") :]
    for junk in (b"not json\n", b'{"v": 99, "op": "search"}\n', b"[]\n"):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(30)
            s.connect(path)
            s.sendall(junk)
            reply = s.recv(65536)
        assert b'"text"' not in reply
    # still serving
    good = cli(env, db, model_dir, "search", "thumbnails library", "-j", "-k", "1", importtime=True)
    assert good.returncode == 0 and not imported(good.stderr, "pymilvus")
    assert "libvips" in json.loads(good.stdout)[0]["content"]


@pytest.mark.slow(reason="starts the search service through the CLI and waits on it")
def test_a_server_from_before_an_upgrade_does_not_answer(env, db, model_dir, corpus, tmp_path):
    import shutil

    import memsearch_fast

    # An installation of its own: a new stamp on the shared one would turn away the
    # services that tests running beside this one start and ask.
    site = tmp_path / "site"
    shutil.copytree(Path(memsearch_fast.__file__).parent, site / "memsearch_fast")
    env = dict(env, PYTHONPATH=os.pathsep.join(filter(None, [str(site), env.get("PYTHONPATH")])))
    where = [sys.executable, "-c", "import memsearch_fast; print(memsearch_fast.__file__)"]
    assert subprocess.run(where, env=env, capture_output=True, text=True).stdout.startswith(str(site))
    assert cli(env, db, model_dir, "index", str(corpus), "-q").returncode == 0
    served = cli(env, db, model_dir, "search", "advisory lock timeout", "-j", "-k", "1", importtime=True)
    assert not imported(served.stderr, "pymilvus")
    init = site / "memsearch_fast" / "__init__.py"
    st = init.stat()
    os.utime(init, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # reinstalled files: a new stamp
    debug = dict(env, MEMSEARCH_DEBUG="1")  # says why the service did not answer
    own = cli(debug, db, model_dir, "search", "advisory lock timeout", "-j", "-k", "1", importtime=True)
    assert own.returncode == 0 and imported(own.stderr, "pymilvus")
    assert "searching in this process: the service answered {'unsupported': 'another installation" in own.stderr
    assert own.stdout == served.stdout


@pytest.mark.parametrize("unload", ["1", "5m"])  # a value that is no number of seconds is the default
@pytest.mark.slow(reason="waits out the server's idle timeout")
def test_a_server_that_serves_searches_still_exits_when_idle(env, db, model_dir, corpus, unload):
    # An idle timeout of 6 s: a CLI's start between two searches took over 3 s on two busy
    # cores, and the server had gone idle before the next search came (it was searched in process).
    env = dict(env, MEMSEARCH_LITE_IDLE_TIMEOUT="6", MEMSEARCH_SEARCH_UNLOAD_S=unload, MEMSEARCH_DEBUG="1")
    assert cli(env, db, model_dir, "index", str(corpus), "-q").returncode == 0
    pid = lite_state.read_state(str(db))["pid"]
    for _ in range(3):
        out = cli(env, db, model_dir, "search", "advisory lock timeout", "-j", "-k", "1", importtime=True)
        assert out.returncode == 0 and not imported(out.stderr, "pymilvus"), _said(out.stderr, db)
    # Gone within the idle timeout and 5 s: the service's own connections to its engine
    # (its searches, watchers, keeper) are no clients that keep it up.
    deadline = time.monotonic() + 6 + 5
    while time.monotonic() < deadline and lite_process.pid_alive(pid):
        time.sleep(0.2)
    assert not lite_process.pid_alive(pid)
    assert lite_state.read_state(str(db)) is None
    assert not os.path.exists(lite_sockets.search_socket(lite_sockets.socket_path(str(db), pid)))


@pytest.mark.slow(reason="starts the search service through the CLI and waits on it")
def test_with_a_saved_copy_a_search_starts_the_server_and_asks_it(env, db, model_dir, corpus):
    """No server runs, but the service's in-memory copy is saved beside the
    database: the CLI starts the server and its service answers from the saved
    copy, where the CLI would have waited for the engine to load the spans."""
    from memsearch_fast.lite import broker

    env = dict(env, MEMSEARCH_DENSE_INDEX_MIN_ROWS="0")
    assert cli(env, db, model_dir, "index", str(corpus), "-q").returncode == 0
    question = ["search", "which port does the gateway listen on", "-j", "--explain"]
    first = cli(env, db, model_dir, *question, importtime=True)
    assert first.returncode == 0 and not imported(first.stderr, "pymilvus"), first.stderr[-2000:]
    deadline = time.monotonic() + 120  # the service loads its copy after the first search, then saves it
    while time.monotonic() < deadline and not list(db.parent.glob(db.name + ".copy-*.npz")):
        time.sleep(0.2)
    assert list(db.parent.glob(db.name + ".copy-*.npz"))
    broker.stop_server(str(db))
    assert lite_state.read_state(str(db)) is None
    again = cli(env, db, model_dir, *question, importtime=True)
    assert again.returncode == 0 and not imported(again.stderr, "pymilvus"), again.stderr[-2000:]
    assert lite_state.read_state(str(db))["status"] == "ready"

    def ranked(out: str) -> list[tuple[str, int]]:
        return [(h["source"], h["start_line"]) for h in json.loads(out)]

    assert ranked(again.stdout) == ranked(first.stdout) and "port 20000" in json.loads(again.stdout)[0]["content"]
    # Without a saved copy of this collection (another collection's does not
    # count) the CLI searches by itself, as before.
    broker.stop_server(str(db))
    for saved in db.parent.glob(db.name + ".copy-*.npz"):
        saved.rename(saved.with_name(db.name + ".copy-0123456789ab.npz"))
    own = cli(env, db, model_dir, *question, importtime=True)
    assert own.returncode == 0 and imported(own.stderr, "pymilvus")
    assert ranked(own.stdout) == ranked(first.stdout)


def test_only_the_local_onnx_model_on_a_local_database_qualifies(tmp_path, monkeypatch, model_dir):
    from memsearch_fast import config

    monkeypatch.delenv("MEMSEARCH_LITE_MODE", raising=False)
    monkeypatch.delenv(search_service.ENV_SWITCH, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("MEMSEARCH_OFFLINE", "1")
    monkeypatch.chdir(tmp_path)
    base = {"milvus.uri": str(tmp_path / "m.db"), "embedding.model": str(model_dir)}
    cfg = config.resolve(base)
    _, req = search_service.request_for(cfg, "q")
    assert req["model_dir"] == str(model_dir.resolve()) and req["model_name"] == os.path.abspath(model_dir)
    for key, value in (
        ("embedding.provider", "openai"),
        ("milvus.uri", "http://localhost:19530"),
        ("reranker.model", "some/cross-encoder"),
        ("embedding.model", "acme/not-on-this-machine"),  # this process downloads it, or says why not
    ):
        assert search_service.request_for(config.resolve({**base, key: value}, resolve_env=False), "q") is None
    # a model directory given relative to this directory is sent as the absolute path it names here
    (tmp_path / "models").mkdir()
    os.symlink(model_dir, tmp_path / "models" / "m")
    _, rel = search_service.request_for(config.resolve({**base, "embedding.model": "./models/m"}), "q")
    assert rel["model_name"] == os.path.join(os.getcwd(), "models", "m")  # the link's name, as in process
    monkeypatch.setenv(search_service.ENV_SWITCH, "off")
    assert search_service.request_for(cfg, "q") is None
    monkeypatch.setenv(search_service.ENV_SWITCH, "1")
    monkeypatch.setenv("MEMSEARCH_LITE_MODE", "embedded")
    assert search_service.request_for(cfg, "q") is None


def test_a_reimported_model_is_loaded_again_and_few_stay_loaded(tmp_path):
    """The loaded models are keyed by their files' identities; nothing here loads
    a model or connects (a MemSearch opens both on first use)."""
    model = tmp_path / "model"
    (model / "onnx").mkdir(parents=True)
    (model / "tokenizer.json").write_text("{}")
    (model / "onnx" / "model_quantized.onnx").write_bytes(b"x")
    service = search_service.Service(str(tmp_path / "s.sock"), "unix:/nonexistent.sock", lambda: None)
    try:
        first = service._instance("c", str(model), "m")
        assert service._instance("c", str(model), "m") is first
        (model / "onnx" / "model_quantized.onnx").write_bytes(b"another model")  # `model import` again
        second = service._instance("c", str(model), "m")
        assert second is not first and list(service._instances.values()) == [second]
        for i in range(search_service.MAX_LOADED + 2):
            service._instance(f"c{i}", str(model), "m")
        assert len(service._instances) == search_service.MAX_LOADED
        assert second not in service._instances.values()  # the least recently used went first
    finally:
        service.stop()
    assert not (tmp_path / "s.sock").exists()
