"""The server record (``<db>.server.json``): where a database's server listens and which database it opened."""

from __future__ import annotations

import contextlib
import json
import os
from typing import Any

from memsearch_fast.errors import StoreError
from memsearch_fast.lite.settings import HOST
from memsearch_fast.lite.sidecars import open_sidecar, sidecar_paths, write_sidecar_json


def record_address(st: dict[str, Any]) -> str | None:
    """Where a recorded server listens (records of older versions name only a port)."""
    address = st.get("address")
    if isinstance(address, str):
        return address
    port = st.get("port")
    return f"{HOST}:{port}" if isinstance(port, int) else None


# Record files are a few hundred bytes; anything much larger is not a record.
_RECORD_LIMIT = 1 << 16


def database_id(db_path: str) -> list[int] | None:
    """The identity of the file (or 3.x directory) at ``db_path``: a server
    records the one it opened, so that a database removed or replaced under
    it (``rm`` to rebuild the index) is never served in its place."""
    try:
        st = os.stat(db_path)
    except OSError:
        return None
    return [st.st_dev, st.st_ino]


def serves_current_database(db_path: str, st: dict[str, Any]) -> bool:
    """Whether the database a server record names is still the one at ``db_path``
    (a record without an identity, from an older server, is taken at its word)."""
    recorded = st.get("db_id")
    if not isinstance(recorded, list):
        return True
    return database_id(db_path) == recorded


def read_state(db_path: str, *, beside: bool = False) -> dict[str, Any] | None:
    """The recorded server for ``db_path`` (may be stale or forged: see
    ``process.verify_server``), or None; ``beside``: the record beside the
    database, wherever :func:`sidecar_paths` puts it now.

    A record that is a symlink, not a regular file or not this user's is no
    record: the next server replaces it (``write_state`` renames over the name).
    """
    try:
        fd = open_sidecar(sidecar_paths(db_path, beside=beside)["state"], os.O_RDONLY)
    except (OSError, StoreError):
        return None
    try:
        with os.fdopen(fd, "rb") as f:
            raw = f.read(_RECORD_LIMIT + 1)
        data = json.loads(raw.decode("utf-8")) if len(raw) <= _RECORD_LIMIT else None
        return data if isinstance(data, dict) else None
    except (OSError, ValueError):
        return None


def write_state(db_path: str, data: dict[str, Any]) -> None:
    """Atomically replace the server record (0600).

    The temp file is created with ``O_EXCL | O_NOFOLLOW`` after removing any
    leftover of that name (a crashed writer's, or a planted link: ``unlink``
    never follows it), and renamed over the record, which replaces a link
    there rather than writing through it.
    """
    write_sidecar_json(sidecar_paths(db_path)["state"], data, what="the server record")


def remove_state_if(db_path: str, pid: int) -> None:
    st = read_state(db_path)
    if st is not None and st.get("pid") == pid:
        with contextlib.suppress(OSError):
            os.unlink(sidecar_paths(db_path)["state"])
