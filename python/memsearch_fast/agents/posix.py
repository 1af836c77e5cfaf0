"""Whether the hooks can run here: they need a POSIX system (``flock``,
``O_NOFOLLOW`` and ``openat``-style folder checks, ``SIGALRM`` deadlines,
``select`` on a pipe), so on Windows they say so in one line instead of
failing with a traceback. This module imports nothing else of the package, so
the check runs before anything POSIX-only is loaded.

``MEMSEARCH_TEST_OS_NAME`` replaces ``os.name`` for this check alone: it lets
a test see the Windows answer on a POSIX machine; nothing else reads it.
"""

from __future__ import annotations

import os

MESSAGE = (
    "[memsearch] Windows is not supported: memsearch-fast's hooks need a POSIX system "
    "(Linux, macOS, or WSL); memory is off in this session"
)


def unsupported() -> str:
    """The one-line reason the hooks cannot run on this system; '' when they can."""
    from memsearch_fast.config import environment

    name = environment.text("MEMSEARCH_TEST_OS_NAME") or os.name
    return "" if name == "posix" else MESSAGE
