"""``.memsearch/hooks.log``: where hooks report, since the agent's session must not see it.

The folder and the log come with the repository, so the log is appended to
without following links (a clone may point ``hooks.log`` at ``~/.bashrc``),
created 0600, and every line is one line of printable text: repository
values (a file name, a config value) are written, never interpreted.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

from memsearch_fast.errors import one_line

LOG_NAME = "hooks.log"
#: The log is cut to its newer half past this size.
MAX_BYTES = 1 << 20
_CONTROL = re.compile(r"[\x00-\x1f\x7f\x9b]")


def line(level: str, message: str) -> bytes:
    """One log line: a timestamp, the level, the pid and *message* made printable."""
    text = _CONTROL.sub("?", one_line(message, 500))
    return f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {level} pid={os.getpid()} {text}\n".encode("utf-8", "replace")


def _write(where: Path | None, level: str, message: str) -> None:
    from memsearch_fast._os import append_private

    # The user's own ~/.memsearch may be a link they made; a project's may not.
    folder = where if where is not None else Path(os.path.realpath(os.path.expanduser("~/.memsearch")))
    try:
        append_private(folder, LOG_NAME, line(level, message), max_bytes=MAX_BYTES)
    except OSError:
        if where is not None:  # a project folder we may not write to: the user's own log instead
            _write(None, level, message)


def log_error(where: Path | None, message: str) -> None:
    _write(where, "ERROR", message)


def log_info(where: Path | None, message: str) -> None:
    _write(where, "INFO", message)
