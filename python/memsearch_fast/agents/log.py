"""``.memsearch/hooks.log``: where hooks report, since the agent's session must not see it."""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

from memsearch_fast.errors import one_line

LOG_NAME = "hooks.log"
#: The log is cut to its newer half past this size.
MAX_BYTES = 1 << 20


def _write(where: Path | None, level: str, message: str) -> None:
    folder = where if where is not None else Path(os.path.expanduser("~")) / ".memsearch"
    path = folder / LOG_NAME
    line = f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {level} pid={os.getpid()} {one_line(message, 500)}\n"
    with contextlib.suppress(OSError):
        folder.mkdir(parents=True, exist_ok=True)
        if path.exists() and path.stat().st_size > MAX_BYTES:
            data = path.read_bytes()[-MAX_BYTES // 2 :]
            path.write_bytes(data[data.find(b"\n") + 1 :])
        with open(path, "a", encoding="utf-8") as f:
            f.write(line)


def log_error(where: Path | None, message: str) -> None:
    _write(where, "ERROR", message)


def log_info(where: Path | None, message: str) -> None:
    _write(where, "INFO", message)
