"""Who counts as a client of a server's engine (:func:`memsearch_fast.lite.server.count_connections`).

The server is a client of its own engine (its searches, watchers and keeper):
those connections must not keep it from its idle exit. A real listening socket
in another process, as the engine is; real connections from this process and
from another.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import pytest

from memsearch_fast.lite.server import count_connections

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="socket diagnostics are Linux's")

#: An "engine": listens on the path, accepts and holds every connection.
ENGINE = """
import socket, sys
s = socket.socket(socket.AF_UNIX); s.bind(sys.argv[1]); s.listen(8)
print("ready", flush=True)
held = []
while True:
    held.append(s.accept()[0])
"""
#: Another process's client: connects and waits for stdin to close.
CLIENT = """
import socket, sys
c = socket.socket(socket.AF_UNIX); c.connect(sys.argv[1]); print("connected", flush=True); sys.stdin.read()
"""


def _settled(address: str, want: int) -> int | None:
    deadline = time.monotonic() + 5
    got = count_connections(address)
    while got != want and time.monotonic() < deadline:
        time.sleep(0.05)
        got = count_connections(address)
    return got


def test_this_processs_own_connections_to_its_engine_are_no_clients(short_tmp) -> None:
    path = str(short_tmp / "engine.sock")
    engine = subprocess.Popen([sys.executable, "-c", ENGINE, path], stdout=subprocess.PIPE, text=True)
    other = None
    try:
        assert engine.stdout is not None and engine.stdout.readline().strip() == "ready"
        address = f"unix:{path}"
        assert _settled(address, 0) == 0
        own = [socket.socket(socket.AF_UNIX) for _ in range(3)]  # the server's searches, watchers, keeper
        for s in own:
            s.connect(path)
        assert _settled(address, 0) == 0
        other = subprocess.Popen(
            [sys.executable, "-c", CLIENT, path], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        assert other.stdout is not None and other.stdout.readline().strip() == "connected"
        assert _settled(address, 1) == 1  # another process: a client
        other.communicate("", timeout=10)
        assert _settled(address, 0) == 0
        for s in own:
            s.close()
    finally:
        engine.kill()
        engine.communicate()
        if other is not None and other.poll() is None:
            other.kill()
            other.communicate()
