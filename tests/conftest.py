"""Shared fixtures: the test model, the bundled sample, the subprocesses' environment.

Tiers come from what a test uses (``pytest_collection_modifyitems``): the
fixtures it requests mark it ``model`` (the real ONNX model) or ``lite`` (a
Milvus Lite database); ``e2e`` (a ``memsearch``, hook, agent or server
subprocess) is read from its code, its fixtures' and the helpers they call.
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

from tests.helpers.model import MISSING, cache_root, find_model_dir

ROOT = Path(__file__).resolve().parents[1]
SAMPLE_DIR = ROOT / "examples" / "sample"
TESTS = ROOT / "tests"

#: Fixtures that open a Milvus Lite database (a server process per database).
LITE_FIXTURES = {"db", "indexed", "store", "work", "long_line_db", "dbdir", "lab", "served", "pristine", "user"}
#: What starts a subprocess in a test's code, its fixtures' or the helpers of
#: its module that they call (a name of tests/helpers included).
SPAWNS = ("subprocess", "Popen", "sys.executable", "os.fork", "multiprocessing")


def _spawns(item: pytest.Item) -> bool:
    """Whether the test, a fixture it requests, or a function of its module or
    of tests/helpers that they call, starts a process (read from the source)."""
    func = getattr(item, "function", None)
    if func is None:
        return False
    funcs = [func]
    info = getattr(item, "_fixtureinfo", None)
    for defs in info.name2fixturedefs.values() if info else ():
        funcs.extend(d.func for d in defs)
    seen: set[object] = set()
    while funcs:
        f = inspect.unwrap(funcs.pop())
        if f in seen or not callable(f):
            continue
        seen.add(f)
        module = inspect.getmodule(f)
        if module is None or not str(getattr(module, "__file__", "")).startswith(str(TESTS)):
            continue  # pytest's own fixtures, the package under test
        try:
            source = inspect.getsource(f)
        except (OSError, TypeError):
            continue
        if any(token in source for token in SPAWNS):
            return True
        for name in set(re.findall(r"\b([A-Za-z_]\w*)\(", source)):
            called = getattr(module, name, None)
            if inspect.isfunction(called) or inspect.isclass(called):
                funcs.append(called)
    return False


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
        used = set(getattr(item, "fixturenames", ()))
        if "model_dir" in used:
            item.add_marker(pytest.mark.model)
        if used & LITE_FIXTURES:
            item.add_marker(pytest.mark.lite)
        if _spawns(item):
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
