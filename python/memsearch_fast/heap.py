"""Giving freed heap back to the system in long-lived processes (watcher, server)."""

from __future__ import annotations

import contextlib
import gc
import sys


def give_back_memory() -> None:
    """Return the heap freed so far to the system. glibc keeps freed pages of
    its arenas for reuse, so without this a long-lived process's RSS is that
    of its busiest moment, not of what it holds."""
    gc.collect()
    if sys.platform.startswith("linux"):
        import ctypes

        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL("libc.so.6").malloc_trim(0)
