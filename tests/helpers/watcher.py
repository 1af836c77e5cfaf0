"""A `memsearch watch -j` subprocess whose JSON event lines are read as they come."""

from __future__ import annotations

import json
import queue
import signal
import subprocess
import sys
import threading
import time
from typing import Any

DEBOUNCE_MS = "200"


class Watcher:
    """A `memsearch watch -j` subprocess whose JSON event lines are read on a thread."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "memsearch_fast.cli", "watch", *args, "-j", "--debounce-ms", DEBOUNCE_MS],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            env=env,
        )
        self.events: queue.Queue[dict[str, Any]] = queue.Queue()
        self.stderr: list[str] = []
        self.readers = [
            threading.Thread(target=self._read, daemon=True),
            threading.Thread(target=self._read_err, daemon=True),
        ]
        for reader in self.readers:
            reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.events.put(json.loads(line))

    def _read_err(self) -> None:
        assert self.proc.stderr is not None
        self.stderr.extend(self.proc.stderr)

    def next(self, kind: str, timeout: float = 90.0) -> dict[str, Any]:
        """The next event of ``kind`` (earlier events of other kinds are skipped)."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no {kind!r} event within {timeout} s; stderr: {''.join(self.stderr)[-2000:]}")
            try:
                event = self.events.get(timeout=left)
            except queue.Empty:
                continue
            if event["event"] == kind:
                return event

    def stop(self, sig: int = signal.SIGTERM) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.wait()

    def wait(self, timeout: float = 60) -> int:
        """The exit status of a watcher that ends on its own (no signal sent); its pipes closed."""
        rc = self.proc.wait(timeout=timeout)
        for reader in self.readers:  # they end at the pipes' end of file
            reader.join(timeout=10)
        for pipe in (self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                pipe.close()
        return rc
