"""Scan stage: find the markdown files under the configured paths.

The walk itself runs in Rust; this module validates arguments and reports
unreadable entries through logging (or a callback) instead of failing.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from memsearch_fast._core import ScannedFile
from memsearch_fast._core import scan_paths as _scan_paths

__all__ = ["ScanError", "ScanResult", "ScannedFile", "normalize_ignore_file_names", "scan", "scan_paths"]

logger = logging.getLogger("memsearch_fast.index.scan")


def normalize_ignore_file_names(names: Iterable[str]) -> tuple[str, ...]:
    """Ignore files are bare file names; a path could read outside the roots."""
    normalized: list[str] = []
    for raw in names:
        name = str(raw).strip()
        if not name or name in {".", ".."} or "/" in name or "\\" in name or Path(name).name != name:
            raise ValueError(f"ignore file must be a file name without directories: {raw!r}")
        if name not in normalized:
            normalized.append(name)
    return tuple(normalized)


class ScanError(NamedTuple):
    """A path the scan could not use, and why (``path`` is empty when none applies)."""

    path: str
    reason: str

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}" if self.path else self.reason


@dataclass
class ScanResult:
    """Files found, paths that could not be used, directories that could
    not be listed (files under them may still exist: never prune there), and
    the hidden entries skipped that hold markdown (a run says it left them out)."""

    files: list[ScannedFile]
    errors: list[ScanError]
    incomplete: list[str]
    #: Each with its markdown files (counted within a budget of entries: at least this many).
    hidden: dict[str, int] = field(default_factory=dict)


def scan(
    paths: Iterable[str | os.PathLike[str]],
    *,
    extensions: Iterable[str] = (".md", ".markdown"),
    ignore_hidden: bool = True,
    ignore_files: Iterable[str] = (),
    exclude: Iterable[str] = (),
) -> ScanResult:
    """Like `scan_paths`, returning errors and incomplete directories too.

    An invalid `exclude` pattern raises ValueError before anything is walked.
    """
    roots = [os.path.expanduser(os.fspath(p)) for p in paths]
    files, errors, incomplete, hidden = _scan_paths(
        roots,
        [e.lower() for e in extensions],
        ignore_hidden,
        list(normalize_ignore_file_names(ignore_files)),
        [str(p) for p in exclude],
    )
    return ScanResult(
        files,
        [ScanError(path, reason) for path, reason in errors],
        [os.fspath(d) for d in incomplete],
        {os.fspath(h): n for h, n in hidden if not any(_within(r, os.fspath(h)) for r in roots)},
    )


def _within(path: str, folder: str) -> bool:
    """Whether *path* (a root given, as the user wrote it) is *folder* or lies under it:
    a hidden folder named as a root is indexed, not skipped."""
    real = os.path.realpath(path)
    return real == folder or real.startswith(folder.rstrip(os.sep) + os.sep)


def scan_paths(
    paths: Iterable[str | os.PathLike[str]],
    *,
    extensions: Iterable[str] = (".md", ".markdown"),
    ignore_hidden: bool = True,
    ignore_files: Iterable[str] = (),
    exclude: Iterable[str] = (),
    on_error: Callable[[ScanError], None] | None = None,
) -> list[ScannedFile]:
    """Return the markdown files under *paths*, sorted by path.

    A path may be a file (always eligible when its extension matches) or a
    directory (walked recursively, hidden entries and ignored paths skipped;
    symlinks are followed only to files inside the same root). Missing or
    unreadable paths are reported to *on_error* (default: a warning on the
    ``memsearch_fast.index.scan`` logger), never raised.
    """
    result = scan(paths, extensions=extensions, ignore_hidden=ignore_hidden, ignore_files=ignore_files, exclude=exclude)
    for error in result.errors:
        if on_error is not None:
            on_error(error)
        else:
            logger.warning("skipped %s", error)
    return result.files
