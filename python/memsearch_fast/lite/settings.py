"""MEMSEARCH_LITE_* settings and the constants every side of the server shares."""

from __future__ import annotations

import logging
import os

from memsearch_fast.config import environment

logger = logging.getLogger(__name__)


ENV_MODE = "MEMSEARCH_LITE_MODE"


ENV_IDLE = "MEMSEARCH_LITE_IDLE_TIMEOUT"


ENV_START = "MEMSEARCH_LITE_START_TIMEOUT"


DEFAULT_IDLE_TIMEOUT = 600.0


DEFAULT_START_TIMEOUT = 120.0


HOST = "127.0.0.1"


SERVER_MARK = "memsearch_fast.serve.lite_main"
#: The module earlier versions started servers as: such a server, still running
#: after an upgrade, is recognised as ours.
SERVER_MARKS = (SERVER_MARK, "memsearch_fast.lite.server")


def lite_mode() -> str:
    """``server`` (shared through one process) or ``embedded`` (in this process)."""
    mode = environment.text(ENV_MODE).strip().lower()
    if mode in ("server", "embedded"):
        return mode
    if mode:
        logger.warning("ignoring %s=%r (expected 'server' or 'embedded')", ENV_MODE, mode)
    return "server" if os.name == "posix" else "embedded"


def idle_timeout() -> float:
    return environment.number(ENV_IDLE, DEFAULT_IDLE_TIMEOUT)
