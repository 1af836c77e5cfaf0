"""A damaged database is reported, never served half-loaded.

When the engine cannot load a collection (Milvus Lite 2.x: "Load data failed,
errs: database disk image is malformed", then a segcore assertion), a shared
server would keep whatever part of it was loaded, and every later search,
stats or index would run on that part as if it were the whole. So whoever
sees such a failure first (the client whose call failed, or the server
watching its engine's output) stops the server and leaves a marker,
``<db>.damaged``, holding the cause and the identity of the database file
(device, inode, size, mtime). Every later open of that database raises
:class:`~memsearch_fast.errors.DatabaseDamagedError` naming the database, the
cause and what to delete, without starting a server. Deleting (or replacing)
the database file makes the marker stale; the next open removes it.

The marker is a sidecar like the others: 0600, written through an
``O_EXCL`` temp file renamed over it, never followed through a link.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import stat
from pathlib import Path
from typing import Any

from memsearch_fast.errors import DatabaseDamagedError, StoreError, one_line
from memsearch_fast.lite.sidecars import flock, open_sidecar, sidecar_paths, write_sidecar_json

logger = logging.getLogger(__name__)

#: Error texts that mean the database's content is unreadable: SQLite's own,
#: and the engine's when loading stored rows failed. (A bare "segcore error" is
#: not one: a BM25 search of an empty collection raises one too.)
DAMAGE_PATTERNS = (
    "database disk image is malformed",
    "file is not a database",
    "file is encrypted or is not a database",
    "database corrupt",
    "failed to parse insert data",
    "load data failed",
)

#: The engine's own statement of a failure, in its log lines ("… failed, errs: CAUSE").
_ERRS_RE = re.compile(r"\berrs?: (.+?)\s*$")

#: Bytes of a log read for a cause: enough for the engine's last lines.
_LOG_WINDOW = 64 * 1024

#: Lines of a server log that never state a cause (Python's warnings about milvus-lite's imports).
_NOISE = ("pkg_resources", "from pkg_resources", "UserWarning", "warnings.warn")


def marker_path(db_path: str) -> str:
    return sidecar_paths(db_path)["damaged"]


def is_damage(text: str) -> bool:
    low = text.lower()
    return any(p in low for p in DAMAGE_PATTERNS)


def log_size(db_path: str) -> int:
    """The current size of the server log (where a new server's output starts)."""
    try:
        st = os.lstat(sidecar_paths(db_path)["log"])
    except OSError:
        return 0
    return st.st_size if stat.S_ISREG(st.st_mode) else 0


def read_log(db_path: str, since: int = 0) -> tuple[str, int]:
    """The server log from byte ``since`` (its last 64 KB at most) and the offset it ends at."""
    try:
        fd = open_sidecar(sidecar_paths(db_path)["log"], os.O_RDONLY)
    except (OSError, StoreError):
        return "", since
    with os.fdopen(fd, "rb") as f:
        end = f.seek(0, os.SEEK_END)
        if end < since:  # rotated: read the new file from its start
            since = 0
        f.seek(max(since, end - _LOG_WINDOW))
        return f.read().decode("utf-8", "replace"), end


def cause_in(text: str) -> str:
    """The most telling cause stated in some log text: the engine's last
    ``errs: …`` that means damage, else the last line naming a damage pattern
    (a segcore assertion), else the last ``errs: …``, else ""."""
    stated: list[str] = []
    stated_damage: list[str] = []
    damage_lines: list[str] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or any(n in line for n in _NOISE):
            continue
        m = _ERRS_RE.search(line)
        if m:
            stated.append(m.group(1))
            if is_damage(m.group(1)):
                stated_damage.append(m.group(1))
        elif is_damage(line):
            damage_lines.append(line)
    for found in (stated_damage, damage_lines, stated):
        if found:
            return one_line(_plain(found[-1]), 200)
    return ""


def log_cause(db_path: str, since: int = 0) -> str:
    """The cause stated in the server log since byte ``since`` ("" when none)."""
    return cause_in(read_log(db_path, since)[0])


def stated_since_start(db_path: str) -> str:
    """A damage the running server's engine has stated in its log ("" when none)."""
    from memsearch_fast.lite.state import read_state

    start = (read_state(db_path) or {}).get("log_offset")
    if not isinstance(start, int) or log_size(db_path) <= start:
        return ""
    cause = log_cause(db_path, start)
    return cause if is_damage(cause) else ""


def _plain(cause: str) -> str:
    """Drop a build path from an engine assertion ("… at /workspace/x.cpp:303 : segcore error")."""
    return re.sub(r" at /\S+:\d+", "", cause).strip()


def advice(db_path: str) -> str:
    what = "rm -r" if os.path.isdir(db_path) else "rm"
    return f"delete it ({what} {db_path}) and run 'memsearch index' to rebuild it from the markdown files"


def message(db_path: str, cause: str) -> str:
    return f"Milvus Lite database {db_path} is damaged ({cause}); {advice(db_path)}"


def _identity(db_path: str) -> list[int] | None:
    try:
        st = os.stat(db_path)
    except OSError:
        return None
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns]


def read_marker(db_path: str) -> dict[str, Any] | None:
    try:
        fd = open_sidecar(marker_path(db_path), os.O_RDONLY)
    except FileNotFoundError:
        return None
    except (OSError, StoreError):
        return None
    try:
        with os.fdopen(fd, "rb") as f:
            data = json.loads(f.read(1 << 16).decode("utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def check(db_path: str) -> None:
    """Raise :class:`DatabaseDamagedError` when ``db_path`` was found damaged
    and is still the same file; forget a marker the database has outlived."""
    if not os.path.lexists(marker_path(db_path)):
        return
    data = read_marker(db_path)
    identity = _identity(db_path)
    if data is not None and identity is not None and data.get("identity") == identity:
        raise DatabaseDamagedError(message(db_path, one_line(data.get("cause") or "unreadable collection", 200)))
    logger.info("%s: the database changed since it was found damaged; trying it again", db_path)
    with contextlib.suppress(OSError):
        os.unlink(marker_path(db_path))


def mark(db_path: str, cause: str) -> None:
    """Record that ``db_path`` is damaged (the engine must no longer have it open)."""
    identity = _identity(db_path)
    if identity is None:
        return
    try:
        write_sidecar_json(marker_path(db_path), {"cause": cause, "identity": identity})
    except (OSError, StoreError) as exc:
        logger.warning("cannot record that %s is damaged: %s", db_path, one_line(exc))


def report(db_path: str, error: str, *, shared: bool) -> DatabaseDamagedError:
    """A client's call failed with damage: stop the database's shared server
    (under the broker lock, so no client attaches to the half-loaded collection
    meanwhile), record the cause, and return the error to raise."""
    db_path = str(Path(db_path).expanduser().resolve())
    if not shared:  # embedded: the engine in this process fails every open by itself
        cause = _plain(one_line(error, 200))
        mark(db_path, cause)
        return DatabaseDamagedError(message(db_path, cause))
    from memsearch_fast.lite import broker
    from memsearch_fast.lite.state import read_state

    st = read_state(db_path) or {}
    start = st.get("log_offset")
    # The engine states the cause in its log ("errs: database disk image is
    # malformed"); the client sees only the assertion that followed it.
    cause = (log_cause(db_path, start) if isinstance(start, int) else "") or _plain(one_line(error, 200))
    try:
        with flock(sidecar_paths(db_path)["lock"], timeout=60):
            broker.stop_server(db_path)
            mark(db_path, cause)
    except (OSError, StoreError) as exc:
        logger.warning("cannot stop the server of damaged %s: %s", db_path, one_line(exc))
    return DatabaseDamagedError(message(db_path, cause))
