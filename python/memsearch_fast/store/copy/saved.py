"""The in-memory copy (:mod:`memsearch_fast.store.copy.dense_index`) saved beside a local database.

The database's service exits when idle and starts again with the next
search; reading every chunk and span vector back from Milvus Lite then takes
minutes at 50 MB of journals (209 s), while searches scan the span rows
(1.8 s each). The saved copy is read in a few seconds. It is only a starting
point: the loader refreshes it against the manifest as it refreshes a copy
after an index run (the files whose recorded chunks changed are read again,
the rest kept) and installs it only when that shows it current, so a file
left by an older state, another tool or a hostile repository can cost a
full load but never a wrong answer it would not also give. It holds arrays
and JSON, read with ``allow_pickle=False``: nothing in it runs.

A copy is sealed with a key only this user reads (``~/.memsearch/copy.key``,
made once, 0600): an HMAC-SHA256 of its arrays, checked before anything of it
is used. A copy rewritten by someone else, well formed and with the same ids,
would otherwise put its own contents and sources on the screen; without the
key it is read as absent (a full load), and so is every copy when the key
cannot be kept (a read-only home).
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import logging
import os
import threading
import time
import zipfile
from concurrent.futures import Future
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from memsearch_fast._os import file_stamp
from memsearch_fast.store.copy.file_rows import Described
from memsearch_fast.store.copy.lean import Lean
from memsearch_fast.store.copy.rows import Copy
from memsearch_fast.store.copy.spans import OwnRows, Spans, sign_bits
from memsearch_fast.store.manifest import saved_copy_path

logger = logging.getLogger(__name__)

#: 2: span rows in a basis held in it, each chunk's own vector apart (``own_*``).
FORMAT = 2
_SPAN_ARRAYS = ("codes", "scales", "offsets", "starts", "ends", "index")


def save(path: Path, copy: Copy | Lean) -> None:
    """Write *copy* to *path* atomically (a private temp file, then a rename, never
    through a link); a failure leaves the old file or none and is only logged.
    Span vectors read from a span file are left out: the loader reads them from
    that file again, in a second or two at 50 MB of journals, not twice on disk.
    A lean copy (past the copy's cap) keeps its ids, sources and codes."""
    arrays = _lean_arrays(copy) if isinstance(copy, Lean) else _arrays_of(copy)
    from memsearch_fast._os import write_atomic

    key = copy_key(create=True)
    if key is None:
        logger.info("dense index: copy not saved to %s (no key to seal it with)", path)
        return
    arrays["seal"] = np.frombuffer(_seal(key, arrays), np.uint8)
    try:  # a link planted at *path* is replaced, never written through
        write_atomic(path, lambda f: np.savez(f, **arrays), fsync=False)  # type: ignore[arg-type]
    except Exception as exc:  # noqa: BLE001 - the copy held in memory is not affected
        logger.info("dense index: copy not saved to %s (%s)", path, exc)


def _arrays_of(copy: Copy) -> dict[str, np.ndarray]:
    if copy.spans is not None and copy.spans.filed:
        copy = replace(copy, spans=None)
    meta = {
        "format": FORMAT,
        "dim": int(copy.matrix.shape[1]),
        "ids": copy.ids,
        "sources": copy.sources,
        "fields": copy.fields,
        "entries": copy.entries or {},
        "span_basis": copy.spans.basis if copy.spans is not None else "",
        "span_width": copy.spans.width if copy.spans is not None else 0,
    }
    arrays: dict[str, np.ndarray] = {
        "meta": np.frombuffer(json.dumps(meta, separators=(",", ":")).encode("utf-8"), np.uint8),
        "matrix": np.ascontiguousarray(copy.matrix),
    }
    if copy.spans is not None:
        s = copy.spans
        arrays.update(
            span_codes=np.frombuffer(s.codes, np.int8),
            span_scales=np.frombuffer(s.scales, "<f4"),
            span_offsets=np.frombuffer(s.offsets, "<u4"),
            span_starts=s.starts,
            span_ends=s.ends,
            span_index=s.index,
        )
        if s.own is not None:
            arrays.update(own_codes=np.frombuffer(s.own.codes, np.int8), own_scales=np.frombuffer(s.own.scales, "<f4"))
    return arrays


def _lean_arrays(copy: Lean) -> dict[str, np.ndarray]:
    meta = {
        "format": FORMAT,
        "kind": "lean",
        "dim": copy.own.dim,
        "ids": copy.ids,
        "sources": copy.sources,
        "entries": copy.entries,
    }
    return {
        "meta": np.frombuffer(json.dumps(meta, separators=(",", ":")).encode("utf-8"), np.uint8),
        "own_codes": np.frombuffer(copy.own.codes, np.int8),
        "own_scales": np.frombuffer(copy.own.scales, "<f4"),
    }


#: A file read ahead and never asked for is let go after this many seconds.
AHEAD_KEEP_S = 120.0
_ahead: dict[Path, tuple[tuple[int, int, int], Future[Copy | Lean | None], object]] = {}
_ahead_lock = threading.Lock()


def read_ahead(path: Path) -> None:
    """Start reading the file at *path* in a thread, for the :func:`load` to come:
    a new process's first search opens its collection meanwhile (the engine
    loads it: 8-10 s at 50 MB of journals, while the copy takes 2 s to read)."""
    stamp = file_stamp(path, follow_symlinks=False)
    if stamp is None:
        return
    result: Future[Copy | Lean | None] = Future()
    token = object()  # what the timer holds: never the copy itself
    with _ahead_lock:
        if path in _ahead and _ahead[path][0] == stamp:
            return
        _ahead[path] = (stamp, result, token)

    def read() -> None:
        copy = None
        try:
            copy = _copy(path, None)
        finally:  # a load waiting on it gets an answer whatever happened
            result.set_result(copy)
        timer = threading.Timer(AHEAD_KEEP_S, _let_go, (path, token))
        timer.daemon = True
        timer.start()

    try:
        threading.Thread(target=read, name="saved-copy", daemon=True).start()
    except RuntimeError:  # no thread to be had: the load reads it itself
        _let_go(path, token)
        result.set_result(None)


def _let_go(path: Path, token: object) -> None:
    with _ahead_lock:
        if path in _ahead and _ahead[path][2] is token:
            del _ahead[path]


def drop_ahead(path: Path) -> None:
    """Let go of a read of *path* started ahead: the loader reads the engine instead,
    and both copies would be held until the read is let go (:data:`AHEAD_KEEP_S`)."""
    with _ahead_lock:
        _ahead.pop(path, None)


def load(path: Path, dim: int) -> Copy | Lean | None:
    """The copy saved at *path*, or None when there is none or it does not hold
    rows of *dim* dimensions as :func:`save` writes them. A read started by
    :func:`read_ahead` is used when the file has not changed since."""
    with _ahead_lock:
        stamp, ahead, _ = _ahead.pop(path, (None, None, None))
    if ahead is None or stamp != file_stamp(path, follow_symlinks=False):
        return _copy(path, dim)
    copy = ahead.result()
    if isinstance(copy, Lean):
        return copy if copy.own.dim == dim else None
    return copy if copy is not None and copy.matrix.shape[1] == dim else None


def _copy(path: Path, dim: int | None) -> Copy | Lean | None:
    """The copy in the file at *path* (of *dim* dimensions; None: those it says)."""
    arrays = _arrays(path)
    if arrays is None:
        return None
    try:
        return _parse(arrays, dim)
    except Exception as exc:  # noqa: BLE001 - whatever the file holds, the copy is loaded from Milvus
        logger.info("dense index: saved copy %s not used (%s)", path, exc)
        return None


def _arrays(path: Path) -> dict[str, np.ndarray] | None:
    """The arrays of the file at *path* (never through a link), or None."""
    from memsearch_fast._os import UnsafePathError, open_private

    try:
        fd = open_private(path, os.O_RDONLY, single_link=False)
    except FileNotFoundError:
        return None
    except (OSError, UnsafePathError) as exc:
        logger.info("dense index: saved copy %s not used (%s)", path, exc)
        return None
    try:
        with os.fdopen(fd, "rb") as f:
            with zipfile.ZipFile(f) as zf:  # stored members only: nothing inflates past the file's size
                if any(i.compress_type != zipfile.ZIP_STORED for i in zf.infolist()):
                    raise ValueError("compressed members")
            f.seek(0)
            with np.load(f, allow_pickle=False) as z:
                arrays = {k: z[k] for k in z.files}
        key = copy_key(create=False)
        seal = arrays.pop("seal", None)
        if key is None or seal is None or not hmac.compare_digest(seal.tobytes(), _seal(key, arrays)):
            raise ValueError("not sealed with this user's key")
        return arrays
    except Exception as exc:  # noqa: BLE001 - whatever the file holds, the copy is loaded from Milvus
        logger.info("dense index: saved copy %s not used (%s)", path, exc)
        return None


KEY_FILE = "copy.key"


def copy_key(*, create: bool) -> bytes | None:
    """This user's key for sealing saved copies (made when *create* and missing);
    None when it cannot be read or kept."""
    from memsearch_fast._os import UnsafePathError, open_private

    home = Path(os.path.expanduser("~")) / ".memsearch"
    path = home / KEY_FILE
    for attempt in (0, 1):
        try:
            fd = open_private(path, os.O_RDONLY)
        except FileNotFoundError:
            if not create or attempt:
                return None
            try:
                home.mkdir(mode=0o700, parents=True, exist_ok=True)
                fd = open_private(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
                with os.fdopen(fd, "wb") as f:
                    f.write(os.urandom(32))
            except FileExistsError:
                pass  # another process made it first: read theirs
            except (OSError, UnsafePathError) as exc:
                logger.info("dense index: no key for saved copies (%s)", exc)
                return None
            continue
        except (OSError, UnsafePathError) as exc:
            logger.info("dense index: no key for saved copies (%s)", exc)
            return None
        with os.fdopen(fd, "rb") as f:
            key = f.read(64)
        return key if len(key) >= 32 else None
    return None


def _seal(key: bytes, arrays: dict[str, np.ndarray]) -> bytes:
    """The HMAC of *arrays* (each one's name, type, shape and bytes, by name)."""
    mac = hmac.new(key, digestmod=hashlib.sha256)
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name])
        mac.update(f"{name}\0{a.dtype.str}\0{a.shape}\0".encode())
        mac.update(a.data)
    return mac.digest()


def _parse(arrays: dict[str, np.ndarray], dim: int | None) -> Copy | Lean | None:
    meta = json.loads(arrays["meta"].tobytes().decode("utf-8"))
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        return None
    if dim is None:
        dim = meta.get("dim")
    if not isinstance(dim, int) or dim <= 0 or meta.get("dim") != dim:
        return None
    if meta.get("kind") == "lean":
        return _lean(meta, arrays, dim)
    ids, sources, fields, entries = meta["ids"], meta["sources"], meta["fields"], meta["entries"]
    matrix = arrays["matrix"]
    n = len(ids)
    if (
        matrix.dtype not in (np.float16, np.float32)
        or matrix.shape != (n, dim)
        or len(set(ids)) != n  # a row twice: only a full load would drop it
        or len(sources) != n
        or not isinstance(fields, dict)
        or any(not isinstance(col, list) or len(col) != n for col in fields.values())
        or not isinstance(entries, dict)
        or not all(isinstance(k, str) and isinstance(v, str) for k, v in entries.items())
    ):
        return None
    spans = None
    if "span_codes" in arrays:
        own = _own(arrays, n, dim) if "own_codes" in arrays else None
        width = meta.get("span_width")
        if ("own_codes" in arrays and own is None) or not isinstance(width, int):
            return None
        basis = str(meta.get("span_basis") or "")
        spans = _spans({k: arrays[f"span_{k}"] for k in _SPAN_ARRAYS}, n, dim, width, basis, own)
        if spans is None:
            return None
    out = Copy(list(map(str, ids)), list(map(str, sources)), fields, matrix, None, entries, time.monotonic())
    return out.hold(spans)


def _lean(meta: dict[str, Any], arrays: dict[str, np.ndarray], dim: int) -> Lean | None:
    """A lean copy, current once the loader has compared it with the manifest."""
    ids, sources, entries = meta["ids"], meta["sources"], meta["entries"]
    n = len(ids)
    if (
        len(set(ids)) != n
        or len(sources) != n
        or not isinstance(entries, dict)
        or not all(isinstance(k, str) and isinstance(v, str) for k, v in entries.items())
    ):
        return None
    own = _own(arrays, n, dim)
    if own is None:
        return None
    names: dict[str, str] = {}
    kept = [names.setdefault(src, src) for src in map(str, sources)]
    return Lean(list(map(str, ids)), kept, own, None, Described(-1, entries), time.monotonic())


def _own(a: dict[str, np.ndarray], chunks: int, dim: int) -> OwnRows | None:
    """Each chunk's own vector, held apart from span rows in a basis (None: bad shapes)."""
    codes, scales = a["own_codes"], a["own_scales"]
    if codes.dtype != np.int8 or codes.size != chunks * dim or scales.shape != (chunks,):
        return None
    codes = codes.reshape(chunks, dim)
    return OwnRows(codes.tobytes(), scales.astype("<f4", copy=False).tobytes(), sign_bits(codes), dim)


def _spans(
    a: dict[str, np.ndarray], chunks: int, dim: int, width: int, basis: str, own: OwnRows | None
) -> Spans | None:
    """The span columns, or None when their shapes disagree (the kernel checks its own too).
    With *own* (the chunks' own vectors apart) the span rows are in the basis named
    *basis*, of a *width* under *dim*, and a chunk may have none."""
    offsets = a["offsets"].astype("<u4", copy=False)
    counts = offsets[1:].astype(np.int64) - offsets[:-1].astype(np.int64)
    rows = a["scales"].shape[0]
    if (
        a["codes"].dtype != np.int8
        or a["codes"].size != rows * width
        or offsets.shape != (chunks + 1,)
        or int(offsets[0]) != 0
        or int(offsets[-1]) != rows
        or any(a[k].shape != (rows,) for k in ("starts", "ends", "index"))
        or bool(np.any(counts < 0))
    ):
        return None
    if own is not None:  # span rows alone, in a basis it names
        grouped = bool(basis) and 0 < width < dim and bool(np.all(a["index"] != 0))
    else:  # every dimension, each chunk's own row first in its group
        grouped = not basis and width == dim and bool(np.all(counts >= 1))
        grouped = grouped and bool(np.all(a["index"][offsets[:-1].astype(np.int64)] == 0))
    if not grouped:
        return None
    codes = a["codes"].reshape(rows, width)
    return Spans(
        codes=codes.tobytes(),
        scales=a["scales"].astype("<f4", copy=False).tobytes(),
        offsets=offsets.tobytes(),
        signs=sign_bits(codes),
        chunk=np.repeat(np.arange(chunks, dtype=np.int64), counts),
        starts=a["starts"].astype(np.int32, copy=False),
        ends=a["ends"].astype(np.int32, copy=False),
        index=a["index"].astype(np.int32, copy=False),
        width=width,
        basis=basis,
        own=own,
    )


def forget(manifest: Path) -> None:
    """Remove the copy saved beside *manifest* (the collection was dropped)."""
    with contextlib.suppress(FileNotFoundError):
        saved_copy_path(manifest).unlink()
