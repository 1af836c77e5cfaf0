"""A leased root checked before each of its runs in the service.

The hooks check a project's memory folder at each event, but the service's
watcher runs between events: a folder of the root's path replaced by a link
(a ``git pull`` that brings a committed ``.memsearch/memory`` link) would
lead it into whatever the link names, and those notes into the project's
collection. So each run first checks the root as the hooks would; when that
fails, the root's leases end and the rows indexed from it go.
"""

from __future__ import annotations

import logging
import os
from typing import Any

logger = logging.getLogger("memsearch_fast.serve")


def refused(ms: Any, root: str) -> str:
    """ "" while *root* is safe to read; else its rows (in *ms*'s collection) are removed
    and the one line that says so is returned (the caller ends the root's leases)."""
    why = unsafe_root(root)
    if not why:
        return ""
    forget(ms, root)
    logger.warning("%s %s: no longer watched, its rows removed", root, why)
    return f"{root} {why}: no longer watched, and what was indexed from it removed"


def unsafe_root(root: str) -> str:
    """Why a leased root may no longer be read (a folder of the path replaced by a link,
    say by a ``git pull``, would lead the watcher elsewhere), or "" while it is safe.
    A root that is gone is left to the watch loop."""
    from memsearch_fast._os import UnsafePathError, check_dir

    try:
        if not check_dir(root):
            return ""
    except UnsafePathError as exc:
        return str(exc)
    if os.path.realpath(root) != os.path.normpath(root):
        return "now leads through a symbolic link"
    return ""


def forget(ms: Any, root: str) -> None:
    """Remove every row indexed from *root* (its files may have been read through a
    link), under the collection's writer lock, the manifest first: the next run
    reconciles the whole collection."""
    inside = root.rstrip(os.sep) + os.sep
    manifest = ms._manifest()
    with manifest.writer():
        manifest.invalidate()
        store = ms.store
        sources = {src for _, src in store.iter_ids_by_source(None) if src == root or src.startswith(inside)}
        if sources:
            store.delete_sources(sources)
            store.flush()
