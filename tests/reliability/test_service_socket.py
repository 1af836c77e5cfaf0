"""The resident service's socket under clients that hold it: idle connections, a byte
at a time, many at once. A real service (a detached Lite server with its search
service), real unix connections."""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from pathlib import Path

import pytest

from memsearch_fast.lite import broker
from memsearch_fast.serve import client

pytestmark = pytest.mark.skipif(os.name != "posix", reason="the shared server is POSIX-only")


@pytest.fixture
def service(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, short_tmp: Path):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("MEMSEARCH_LITE_IDLE_TIMEOUT", "60")
    for k in ("MEMSEARCH_LITE_MODE", "MEMSEARCH_SEARCH_SERVICE"):
        monkeypatch.delenv(k, raising=False)
    db = short_tmp / "m.db"
    client.ensure_server(str(db))
    st = client.server_record(str(db))
    assert st is not None, "no service started"
    yield db, str(st["search"])[len("unix:") :]
    broker.stop_server(str(db))


def _status_s(db: Path) -> float:
    start = time.monotonic()
    assert client.status(str(db)) is not None
    return time.monotonic() - start


@pytest.mark.slow(reason="starts the resident service and holds its socket for seconds")
def test_idle_and_slow_connections_delay_no_other_request(service) -> None:
    db, path = service
    idle = socket.socket(socket.AF_UNIX)
    idle.connect(path)  # sends nothing
    slow = socket.socket(socket.AF_UNIX)
    slow.connect(path)
    stop = threading.Event()

    def drip() -> None:  # a byte a second, never a whole line
        while not stop.wait(1.0):
            try:
                slow.send(b" ")
            except OSError:
                return

    dripper = threading.Thread(target=drip, daemon=True)
    dripper.start()
    try:
        time.sleep(0.5)
        took = [_status_s(db) for _ in range(5)]
        assert max(took) < 2.0, took  # not the 10 s each held connection used to cost
        # The slow one is dropped at its deadline instead of holding the service for good.
        time.sleep(11)
        slow.settimeout(5)
        assert slow.recv(1) == b""
    finally:
        stop.set()
        idle.close()
        slow.close()


@pytest.mark.slow(reason="starts the resident service and opens hundreds of connections at once")
def test_many_simultaneous_connections_are_all_answered(service) -> None:
    _db, path = service
    answers: list[bool] = []
    lock = threading.Lock()

    def ask() -> None:
        try:
            s = socket.socket(socket.AF_UNIX)
            s.settimeout(60)
            s.connect(path)
            with s:
                s.sendall(json.dumps({"v": client.VERSION, "code": client.code_id(), "op": "status"}).encode() + b"\n")
                ok = b"models" in client.read_line(s)
        except OSError:
            ok = False
        with lock:
            answers.append(ok)

    threads = [threading.Thread(target=ask) for _ in range(300)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert len(answers) == 300 and sum(answers) == 300, f"{answers.count(False)} of 300 not answered"
