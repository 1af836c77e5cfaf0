"""The default database of memsearch 0.4.23: a Milvus Lite 3.x directory.

memsearch 0.4.23 keeps its index at the same default path as ours,
``~/.memsearch/milvus.db``, but with Milvus Lite 3.x, which keeps a database
as a directory; the installed 2.x engine cannot open it. Markdown is the
source of truth, so that index is rebuilt rather than converted: when the
configured URI is the default and a 3.x directory stands there, it is left
as it is and the index goes to :data:`FALLBACK_URI` beside it. The user is
told once per channel (the CLI on stderr, the agent hooks' SessionStart
status line); :data:`FALLBACK_URI` ``.switched`` remembers who was told.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from memsearch_fast.config.schema import DEFAULT_MILVUS_URI
from memsearch_fast.lite.version import milvus_lite_major

#: Where the index goes while a 3.x database holds the default path.
FALLBACK_URI = os.path.join(os.path.dirname(DEFAULT_MILVUS_URI), "milvus-fast.db")
#: Entries Milvus Lite 3.x puts in a database directory (``LOCK``,
#: ``collections/``, ``databases/``, ``.database-staging/``).
_LITE3_ENTRIES = ("LOCK", "collections", "databases", ".database-staging")


def is_lite3_database(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a directory laid out as a Milvus Lite 3.x database."""
    p = Path(path)
    if not p.is_dir() or p.is_symlink():
        return False
    return (p / "collections").is_dir() or sum((p / name).exists() for name in _LITE3_ENTRIES) >= 2


def _expanded(uri: str) -> str:
    return os.path.abspath(os.path.expanduser(uri))


def effective_uri(uri: str) -> str:
    """``uri``, or :data:`FALLBACK_URI` when ``uri`` is the default path and a
    Milvus Lite 3.x database stands there while a 2.x engine is installed."""
    if not uri or _expanded(uri) != _expanded(DEFAULT_MILVUS_URI):
        return uri
    if not is_lite3_database(_expanded(uri)):
        return uri
    major = milvus_lite_major()
    if major is not None and major >= 3:
        return uri
    return FALLBACK_URI


def notice() -> str:
    """The one line that explains the switch."""
    return (
        f"note: {DEFAULT_MILVUS_URI} is a Milvus Lite 3.x database (memsearch 0.4.23's); memsearch-fast "
        f"leaves it as it is and keeps its own index in {FALLBACK_URI}, rebuilt from your markdown "
        "(run 'memsearch index PATH' if it is empty)"
    )


def tell_once(channel: str) -> str:
    """:func:`notice` the first time ``channel`` (``cli``, ``hook``) asks, else "".

    The channels told are kept in ``<fallback>.switched``; a file that cannot
    be read or written means the line is said again next time, never an error.
    """
    from memsearch_fast._os import append_private, read_regular

    marker = Path(_expanded(FALLBACK_URI) + ".switched")
    told: list[str] = []
    with contextlib.suppress(OSError, ValueError):
        told = read_regular(marker, 4096).decode("utf-8", "replace").split()
    if channel in told:
        return ""
    with contextlib.suppress(OSError, ValueError):
        append_private(marker.parent, marker.name, f"{channel}\n".encode())
    return notice()
