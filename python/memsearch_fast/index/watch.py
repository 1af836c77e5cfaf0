"""The watch loop: file events → debounced, coalesced re-index runs.

Events only say *that* something changed. Each run is an ordinary index run
over the roots (the same scanner rules, the same pipeline, the same
per-database server), so create, modify, delete, rename and moves between
roots, directories created or removed, and edits to ignore files all end in
the index a fresh ``memsearch index`` would build; files that did not change
cost a stat and nothing else once the manifest is in place.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memsearch_fast._os import give_back_memory
from memsearch_fast.config.schema import DEFAULT_DEBOUNCE_MS

if TYPE_CHECKING:
    from memsearch_fast.index import IndexReport

#: Longest wait for events before the loop looks again: whether a burst has been
#: quiet for the debounce, whether its roots and database still exist (and,
#: once, the first run: the watcher is armed first, so no change made during a
#: run is missed).
CHECK_INTERVAL_MS = 100
#: How long watchfiles gathers events into one batch. The debounce is counted
#: here, from the last event, not by watchfiles (whose step is slept before it
#: looks and then once more for quiet, which put runs up to twice the debounce
#: after the last write).
GATHER_MS = 50
#: A burst that never goes quiet is still indexed at least this often.
MAX_WAIT_MS = 10_000
#: Backoff after a failed run (seconds): doubled per failure up to the cap.
RETRY_FIRST_S = 1.0
RETRY_MAX_S = 60.0
#: How long every root may be missing before the watcher ends: a root replaced
#: in place (``rm -rf notes && cp -a notes.bak notes``) is briefly absent.
ROOT_GRACE_S = 2.0


@dataclass
class WatchEvent:
    """What one turn of the loop did: an index run, a failed run, or the reason it stopped."""

    kind: str  # "indexed", "error", "stopped", "failed" (a final error: the loop ends)
    report: IndexReport | None = None
    error: str = ""
    changes: int = 0  # file events behind this run
    retry_in: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        """The event as ``watch -j`` prints it (and the service streams it)."""
        if self.kind == "indexed" and self.report is not None:
            return {"event": "indexed", "changes": self.changes, **self.report.as_dict()}
        if self.kind == "error":
            return {"event": "error", "error": self.error, "retry_in": self.retry_in}
        if self.kind == "failed":
            return {"event": "failed", "error": self.error}
        return {"event": self.kind, "reason": self.error or "stopped"}


def _relevant(
    extensions: Sequence[str], ignore_files: Sequence[str], roots: Sequence[str] = ()
) -> Callable[[Any, str], bool]:
    """A cheap pre-filter: which raw events may change the index.

    It only decides whether a run is worth starting; what is indexed is
    decided by the scanner's own rules in that run. A path without a
    markdown suffix may be a directory (created, removed or renamed), so it
    passes unless it lies in a hidden directory the scan never enters. Only
    the part below its root counts: a root may itself be hidden (an agent's
    ``.memsearch/memory``), as ``memsearch index`` allows.
    """
    exts = tuple(e.lower() for e in extensions)
    names = frozenset(ignore_files)
    bases = sorted((os.path.join(r, "") for r in roots), key=len, reverse=True)
    top = frozenset(roots)

    def below_root(path: str) -> str:
        for base in bases:
            if path.startswith(base):
                return path[len(base) :]
        return path

    def accept(_change: Any, path: str) -> bool:
        if path in top:
            return True  # a root itself deleted or replaced: the watcher must re-arm
        name = os.path.basename(path)
        if name in names:
            return True
        if any(part.startswith(".") for part in Path(below_root(path)).parts):
            return False
        return name.lower().endswith(exts) or "." not in name

    return accept


def _roots_alive(roots: Sequence[str]) -> bool:
    return any(os.path.exists(r) for r in roots)


def _armed(roots: Sequence[str]) -> list[tuple[str, int, int]]:
    """(root, device, inode) of each root that exists: a root replaced in place
    (``mv notes old && cp -a old notes``) is another directory, which a watcher
    armed on the old one never hears from."""
    out = []
    for r in roots:
        with contextlib.suppress(OSError):
            st = os.stat(r)
            out.append((r, st.st_dev, st.st_ino))
    return out


class _Burst:
    """Changes seen and not yet indexed: when the burst began, when it last grew,
    and the backoff after a failed run."""

    def __init__(self, quiet_s: float, longest_s: float) -> None:
        self.quiet_s, self.longest_s = quiet_s, longest_s
        self.pending = 1  # the first run: whatever changed while no watcher ran
        self.first_at = self.last_at = 0.0
        self.delay = 0.0
        self.indexed_once = False

    def add(self, n: int, now: float) -> None:
        if not self.pending:
            self.first_at = now
        self.pending += n
        self.last_at = now

    def nudged(self, rerun: asyncio.Event | None, now: float) -> None:
        """A run asked for from outside counts as one change."""
        if rerun is not None and rerun.is_set():
            rerun.clear()
            self.add(1, now)

    def due(self, now: float) -> bool:
        return bool(self.pending) and (now - self.last_at >= self.quiet_s or now - self.first_at >= self.longest_s)


async def _index(
    run: Callable[[], Awaitable[IndexReport]], burst: _Burst, stop: asyncio.Event
) -> AsyncIterator[WatchEvent]:
    """One run for the burst in hand; a failure waits its backoff (or *stop*),
    except one that no retry can fix, which ends the loop."""
    from memsearch_fast.errors import UnusableDatabaseError, describe

    try:
        report = await run()
    except UnusableDatabaseError as exc:
        stop.set()  # the loop ends: its last event is "stopped"
        yield WatchEvent("failed", error=describe(exc), changes=burst.pending)
    except Exception as exc:  # noqa: BLE001 - reported, retried with backoff
        burst.delay = min(RETRY_MAX_S, burst.delay * 2 if burst.delay else RETRY_FIRST_S)
        yield WatchEvent("error", error=describe(exc), changes=burst.pending, retry_in=burst.delay)
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=burst.delay)
    else:
        burst.delay = 0.0
        burst.indexed_once = True
        give_back_memory()
        yield WatchEvent("indexed", report=report, changes=burst.pending)
        burst.pending = 0


async def watch(
    run: Callable[[], Awaitable[IndexReport]],
    paths: Sequence[str],
    *,
    ignore_files: Sequence[str] = (),
    debounce_ms: int = DEFAULT_DEBOUNCE_MS,
    stop: asyncio.Event | None = None,
    extensions: Sequence[str] = (".md", ".markdown"),
    database: str | None = None,
    rerun: asyncio.Event | None = None,
    source: Callable[..., AsyncIterator[set[Any]]] | None = None,
) -> AsyncIterator[WatchEvent]:
    """``run()`` (an index run of *paths*) now, then again after every burst of changes.

    A burst ends when no event arrived for ``debounce_ms``. Yields one
    :class:`WatchEvent` per run. Ends when ``stop`` is set (after the run in
    hand is written and flushed), when every root is gone, or when the local
    database file ``database`` is gone. A failed run (unreadable store,
    transient error) is reported and retried with backoff, except a database
    or server that can never hold the index (``UnusableDatabaseError``): that
    sets *stop*: a "failed" event, then "stopped". Setting *rerun* asks for a
    run as if a file had changed (a client that joins wants to see one).
    *source* stands in for ``watchfiles.awatch`` (a service's one watcher for all
    its roots, :class:`memsearch_fast.serve.notify.Hub`).
    """
    from watchfiles import awatch

    from memsearch_fast.errors import describe

    stop = stop or asyncio.Event()
    roots = [str(Path(p).expanduser().resolve()) for p in paths]
    quiet_s = max(0, int(debounce_ms)) / 1000
    burst = _Burst(quiet_s, max(quiet_s * 4, MAX_WAIT_MS / 1000))
    accept = _relevant(extensions, ignore_files, roots)
    root_set = frozenset(roots)
    loop = asyncio.get_running_loop()

    def gone() -> str:
        if not _roots_alive(roots):
            return "every watched path is gone"
        if burst.indexed_once and database is not None and not os.path.exists(database):
            return f"the database {database} is gone"
        return ""

    while not stop.is_set():
        end = loop.time() + ROOT_GRACE_S
        while not _roots_alive(roots) and loop.time() < end and not stop.is_set():
            await asyncio.sleep(CHECK_INTERVAL_MS / 1000)
        reason = gone()
        if reason:
            yield WatchEvent("stopped", error=reason)
            return
        armed = _armed(roots)
        try:
            # One watcher for as long as the root set holds: events that
            # arrive during a run are kept by it and start the next run.
            async for changes in (source or awatch)(
                *[r for r, _, _ in armed],
                watch_filter=accept,
                debounce=GATHER_MS * 4,
                step=GATHER_MS,
                stop_event=stop,
                rust_timeout=CHECK_INTERVAL_MS,
                yield_on_timeout=True,
                ignore_permission_denied=True,
            ):
                if changes:
                    burst.add(len(changes), loop.time())
                burst.nudged(rerun, loop.time())
                if burst.due(loop.time()) and not stop.is_set():
                    async for event in _index(run, burst, stop):
                        yield event
                if gone() or _armed(roots) != armed or any(path in root_set for _, path in changes):
                    # Gone, or a root came back, vanished or was replaced (its inode number
                    # may be reused, but its deletion is reported): what is at the roots
                    # now is unseen by events, so watch the new set and look again.
                    burst.pending += 1
                    break
        except (FileNotFoundError, RuntimeError) as exc:
            # The notify backend gives up when a watched root disappears.
            if _roots_alive(roots):
                yield WatchEvent("error", error=describe(exc), retry_in=RETRY_FIRST_S)
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(stop.wait(), timeout=RETRY_FIRST_S)
            burst.pending += 1
    yield WatchEvent("stopped", error="")
