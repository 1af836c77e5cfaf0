"""Shared fixtures: the test model, the bundled sample, the subprocesses' environment.

Tiers come from what a test uses (``pytest_collection_modifyitems``):
``model`` when it requests the real ONNX model; ``lite`` (a Milvus Lite
database) and ``e2e`` (a ``memsearch``, hook, agent or server subprocess)
read from its code, its fixtures' and the functions of the tests they call.
``slow`` is set by hand, with the reason.
"""

from __future__ import annotations

import inspect
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.model import INFERENCE_TESTS, MISSING, cache_root, find_model_dir, memoized_inference

ROOT = Path(__file__).resolve().parents[1]
SAMPLE_DIR = ROOT / "examples" / "sample"
TESTS = ROOT / "tests"

#: What starts a process, in a test's code, its fixtures' or a function they call.
SPAWNS = ("subprocess", "Popen", "sys.executable", "os.fork", "multiprocessing")
#: What opens a Milvus Lite database there (a server process, or the engine in process, per database).
OPENS_LITE = ("MemSearch(", "MilvusStore(", "milvus_uri", "--milvus-uri", '.db"', "open_ms(")


def _calls(f: object) -> tuple[str, list[object]]:
    """The source of *f*, a function of the tests, and the functions of the tests
    it calls; ("", []) for anything else (pytest's fixtures, the package)."""
    module = inspect.getmodule(f)
    if module is None or not str(getattr(module, "__file__", "")).startswith(str(TESTS)):
        return "", []
    try:
        source = inspect.getsource(f)
    except (OSError, TypeError):
        return "", []
    names = set(re.findall(r"\b([A-Za-z_]\w*)\(", source))
    called = [getattr(module, n, None) for n in sorted(names)]
    return source, [c for c in called if inspect.isfunction(c) or inspect.isclass(c)]


_HOLDS: dict[tuple[object, tuple[str, ...]], bool] = {}


def _holds(f: object, tokens: tuple[str, ...], seen: set[object]) -> bool:
    """Whether *f*'s source, or that of a function of the tests it calls, holds one of *tokens*."""
    f = inspect.unwrap(f)
    key = (f, tokens)
    if key in _HOLDS:
        return _HOLDS[key]
    if f in seen:
        return False
    seen.add(f)
    source, called = _calls(f)
    found = any(t in source for t in tokens) or any(_holds(c, tokens, seen) for c in called)
    _HOLDS[key] = found
    return found


def _uses(item: pytest.Item, tokens: tuple[str, ...]) -> bool:
    """Whether the test, a fixture it requests, or a function of the tests that
    they call (its module's, or a helper it imported) holds one of *tokens*."""
    func = getattr(item, "function", None)
    if func is None:
        return False
    funcs = [func]
    info = getattr(item, "_fixtureinfo", None)
    for defs in info.name2fixturedefs.values() if info else ():
        funcs.extend(d.func for d in defs)
    return any(_holds(f, tokens, set()) for f in funcs)


def _process() -> str:
    return os.environ.get("PYTEST_XDIST_WORKER", "main")


def _isolate() -> None:
    """A HOME of this test process's own, so no test reads the user's
    ~/.memsearch; an xdist worker also gets a temp dir of its own, so two
    workers never share a socket directory. (The controller keeps the temp dir:
    pytest's base temp dir, which the workers' ``tmp_path`` lie in, stays where
    pytest keeps and prunes it.) The model cache stays the user's."""
    os.environ.setdefault("MEMSEARCH_TEST_CACHE", str(cache_root()))
    base = Path(tempfile.mkdtemp(prefix=f"ms-{_process()}-"))
    (base / "home").mkdir(mode=0o700)
    os.environ.update(MEMSEARCH_TEST_BASE=str(base), MEMSEARCH_TEST_BASE_OWNER=_process(), HOME=str(base / "home"))
    if "PYTEST_XDIST_WORKER" in os.environ:
        (base / "tmp").mkdir(mode=0o700)
        os.environ["TMPDIR"] = str(base / "tmp")
        tempfile.tempdir = None  # gettempdir() reads TMPDIR again


def pytest_configure(config: pytest.Config) -> None:
    if os.environ.get("MEMSEARCH_TEST_BASE_OWNER") != _process():  # a worker inherits the controller's
        _isolate()


def pytest_unconfigure(config: pytest.Config) -> None:
    base = os.environ.get("MEMSEARCH_TEST_BASE")
    if base and os.environ.get("MEMSEARCH_TEST_BASE_OWNER") == _process():
        from memsearch_fast.lite import broker as lite_broker

        for state in Path(base).rglob("*.server.json"):
            lite_broker.stop_server(str(state)[: -len(".server.json")])
        shutil.rmtree(base, ignore_errors=True)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Markers by what a test uses: see the module's docstring. Everything
    under tests/reliability is ``reliability``; ``slow`` needs its reason."""
    for item in items:
        if "model_dir" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.model)
        if _uses(item, OPENS_LITE):
            item.add_marker(pytest.mark.lite)
        if _uses(item, SPAWNS):
            item.add_marker(pytest.mark.e2e)
        if "reliability" in Path(str(item.path)).parts:
            item.add_marker(pytest.mark.reliability)
        for mark in item.iter_markers("slow"):
            if not mark.kwargs.get("reason"):
                raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.slow(reason=...) says why it is slow")


@pytest.fixture(scope="session")
def model_dir() -> Path:
    """The ONNX export of all-MiniLM-L6-v2 (tests/helpers/model.py says where it comes from)."""
    path = find_model_dir()
    if path is None or not (path / "tokenizer.json").is_file():
        pytest.fail(f"{MISSING} (looked in {path})" if path else MISSING)
    return path


@pytest.fixture(autouse=True)
def _inference_once(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """The int8 model's vector of a text computed once in this process (see
    ``memoized_inference``), but in the tests about inference. Subprocesses run it."""
    if request.path.relative_to(TESTS).as_posix() in INFERENCE_TESTS:
        return
    from memsearch_fast.embeddings.onnx import OnnxEmbedding

    monkeypatch.setattr(OnnxEmbedding, "_infer", memoized_inference(OnnxEmbedding._infer))


@pytest.fixture(scope="session")
def sample_dir() -> Path:
    return SAMPLE_DIR


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """Environment for `memsearch` subprocesses: a HOME of their own, the installed
    package (the one this process imports), databases shared through their server."""
    home = tmp_path / "home"
    home.mkdir()
    e = dict(os.environ, HOME=str(home))
    for k in ("MEMSEARCH_LITE_MODE", "MEMSEARCH_SEARCH_SERVICE", "MEMSEARCH_SEARCH_UNLOAD_S"):
        e.pop(k, None)
    return e


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A temp directory with a short path (``tmp_path`` under an xdist worker
    can be too long for a unix socket's path inside it)."""
    path = Path(tempfile.mkdtemp(prefix="ms-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    """60 KB of generated journals and docs (a module may define its own ``corpus``)."""
    from tests.helpers.corpus import write_corpus

    root = tmp_path / "notes"
    write_corpus(root, total_bytes=60_000, seed=5)
    return root


@pytest.fixture
def db(tmp_path: Path):
    """A database path; its server is stopped after the test."""
    path = tmp_path / "m.db"
    yield path
    from memsearch_fast.lite import broker

    broker.stop_server(str(path))


# Per-database Milvus Lite servers started by tests exit soon after their last
# client, and any still running are stopped when the session ends.
os.environ.setdefault("MEMSEARCH_LITE_IDLE_TIMEOUT", "30")


@pytest.fixture(scope="session", autouse=True)
def _stop_lite_servers(tmp_path_factory: pytest.TempPathFactory):
    yield
    from memsearch_fast.lite import broker as lite_broker

    base = tmp_path_factory.getbasetemp()
    for state in base.rglob("*.server.json"):
        db = str(state)[: -len(".server.json")]
        lite_broker.stop_server(db)
