"""memsearch 0.4.23, the reference the differential tests compare against, in an environment of its own.

Installed beside memsearch-fast, both packages would own one ``bin/memsearch``
(uninstalling either deletes the other's command), so the reference lives in a
virtual environment of its own, whose Python ``MEMSEARCH_TEST_REFERENCE_PYTHON``
names::

    python3 -m venv /tmp/ref && /tmp/ref/bin/pip install memsearch==0.4.23 'milvus-lite>=2.5.1,<3'

(milvus-lite 2.5, the engine of ours, so both tools open one database file).
Without it, the tests that need the reference skip, saying why.

:func:`module` gives a stand-in for one of the reference's modules: calling one
of its functions runs it in a long-lived worker process (one per test session)
and returns the result, objects as namespaces of their fields and properties.
:func:`run` runs a piece of code there and returns its ``result``;
:func:`run_apart` does so in a process of its own.
"""

from __future__ import annotations

import atexit
import json
import os
import subprocess
import threading
from pathlib import Path, PurePath
from types import SimpleNamespace
from typing import Any

import pytest

ENV_VAR = "MEMSEARCH_TEST_REFERENCE_PYTHON"
WORKER = Path(__file__).with_name("reference_worker.py")
SETUP = f"{ENV_VAR} names no Python with memsearch==0.4.23 (README: Run the tests)"


class ReferenceRaised(Exception):
    """The reference raised: ``kind`` is its exception's type name."""

    def __init__(self, kind: str, message: str, trace: str) -> None:
        super().__init__(f"{kind}: {message}")
        self.kind, self.trace = kind, trace


def python() -> str | None:
    """The reference's interpreter, when one is configured and imports memsearch 0.4.23."""
    return _probe()


_probed: list[str | None] = []


def _probe() -> str | None:
    if not _probed:
        exe = os.environ.get(ENV_VAR)
        found = None
        if exe:
            check = "import importlib.metadata as m; assert m.version('memsearch') == '0.4.23'"
            proc = subprocess.run([exe, "-c", check], env=environment(), capture_output=True, timeout=120)
            found = exe if proc.returncode == 0 else None
        _probed.append(found)
    return _probed[0]


def require() -> str:
    """The reference's interpreter, or a skip of the calling test (or module) saying why."""
    exe = python()
    if exe is None:
        pytest.skip(SETUP, allow_module_level=True)
    return exe


def environment(base: dict[str, str] | None = None) -> dict[str, str]:
    """``base`` (os.environ by default) for the reference's process: no path into this checkout."""
    env = {k: v for k, v in (os.environ if base is None else base).items() if k != "PYTHONPATH"}
    env["PYTHONIOENCODING"] = "utf-8"
    return env


def _encode(value: Any) -> Any:
    if isinstance(value, PurePath):
        return {"__path__": str(value)}
    if isinstance(value, (list, tuple)):
        return [_encode(v) for v in value]
    if isinstance(value, dict):
        return {k: _encode(v) for k, v in value.items()}
    return value


def _decode(value: Any) -> Any:
    if isinstance(value, dict):
        if "__object__" in value:
            return SimpleNamespace(**{k: _decode(v) for k, v in value["attrs"].items()})
        return {k: _decode(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_decode(v) for v in value]
    return value


class _Worker:
    def __init__(self, exe: str) -> None:
        self.proc = subprocess.Popen(
            [exe, str(WORKER)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=environment(),
            text=True,
            encoding="utf-8",
        )
        self.lock = threading.Lock()

    def ask(self, request: dict[str, Any]) -> Any:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        with self.lock:
            self.proc.stdin.write(json.dumps(request) + "\n")
            self.proc.stdin.flush()
            line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the reference's worker exited (status {self.proc.wait()})")
        reply = json.loads(line)
        if "error" in reply:
            raise ReferenceRaised(reply["error"], reply["message"], reply["traceback"])
        return _decode(reply["ok"])

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()


_workers: list[_Worker] = []


def _worker() -> _Worker:
    if not _workers:
        worker = _Worker(require())
        atexit.register(worker.close)
        _workers.append(worker)
    return _workers[0]


def run(code: str, **values: Any) -> Any:
    """Run ``code`` in the reference's worker with ``values`` bound; the ``result`` it leaves."""
    return _worker().ask({"exec": code, "values": _encode(values)})


def run_apart(code: str, **values: Any) -> Any:
    """:func:`run` in a process of its own that exits after it: for code that opens a Milvus
    Lite database (the engine it starts keeps the file until its process ends)."""
    worker = _Worker(require())
    try:
        return worker.ask({"exec": code, "values": _encode(values)})
    finally:
        worker.close()


class _Function:
    def __init__(self, target: str) -> None:
        self.target = target

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return _worker().ask({"call": self.target, "args": _encode(list(args)), "kwargs": _encode(kwargs)})

    def __getattr__(self, name: str) -> _Function:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Function(f"{self.target}.{name}")


class _Module:
    def __init__(self, name: str) -> None:
        self.name = name

    def __getattr__(self, name: str) -> _Function:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Function(f"{self.name}:{name}")


def module(name: str) -> Any:
    """A stand-in for the reference's module ``name``: a test that calls into it skips when
    there is no reference, the module's other tests still run."""
    return _Module(name)
