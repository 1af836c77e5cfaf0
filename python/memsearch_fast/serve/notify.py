"""One file watcher for every root a service watches.

Each watchfiles watcher is an inotify instance, and the kernel allows a user
128 of them (``fs.inotify.max_user_instances``): a service watching a root per
watcher took them all at 140 roots, and the user's editors got none. Here one
watcher covers the roots of every :func:`memsearch_fast.index.watch.watch` loop
of the service (:meth:`Hub.changes` has the shape of ``watchfiles.awatch``),
and each loop gets the events under its own roots. When the set of roots
changes (a root leased or released, or replaced in place), a watcher over the
new set is made before the old one is read a last time and closed, so no event
falls between them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

logger = logging.getLogger(__name__)

#: Milliseconds watchfiles gathers events into one batch, and the longest a
#: batch waits (as :mod:`memsearch_fast.index.watch` asks of ``awatch``).
STEP_MS = 50
DEBOUNCE_MS = 200
#: Milliseconds between looks at whether the set of roots changed.
TIMEOUT_MS = 100
#: Seconds before a watcher that could not be made is tried again.
RETRY_S = 0.5


@dataclass(eq=False)
class _Subscriber:
    roots: tuple[str, ...]
    accept: Callable[[Any, str], bool] | None
    loop: asyncio.AbstractEventLoop
    queue: asyncio.Queue[set[tuple[Any, str]]] = field(default_factory=asyncio.Queue)
    armed: threading.Event = field(default_factory=threading.Event)
    #: Why no watcher could be made (its loop reports it and tries again, as with its own).
    error: str = ""

    def owns(self, path: str) -> bool:
        return any(path == r or path.startswith(r.rstrip(os.sep) + os.sep) for r in self.roots)


class Hub:
    """The watcher of a service's roots, in a thread of its own, started by the first subscriber."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._subscribers: list[_Subscriber] = []
        self._rearm = threading.Event()  # the set of subscribers changed
        self._closed = False
        self._thread: threading.Thread | None = None
        #: Watchers made so far (a test counts them; one is alive at a time).
        self.armed = 0

    def close(self) -> None:
        self._closed = True
        self._rearm.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(5.0)

    async def changes(
        self,
        *paths: str,
        watch_filter: Callable[[Any, str], bool] | None = None,
        stop_event: asyncio.Event | None = None,
        rust_timeout: int = TIMEOUT_MS,
        **_ignored: Any,
    ) -> AsyncIterator[set[tuple[Any, str]]]:
        """``watchfiles.awatch(*paths, watch_filter=…, stop_event=…, yield_on_timeout=True)``
        served by the shared watcher: the first batch comes once the paths are
        watched (an empty one when nothing changed), then one every
        *rust_timeout* ms at least."""
        sub = _Subscriber(tuple(os.fspath(p) for p in paths), watch_filter, asyncio.get_running_loop())
        self._add(sub)
        try:
            while not sub.armed.is_set():
                if stop_event is not None and stop_event.is_set():
                    return
                await asyncio.sleep(rust_timeout / 1000)
            if sub.error:
                raise RuntimeError(sub.error)
            yield set()
            while stop_event is None or not stop_event.is_set():
                try:
                    batch = await asyncio.wait_for(sub.queue.get(), rust_timeout / 1000)
                except asyncio.TimeoutError:
                    batch = set()
                yield batch
        finally:
            self._remove(sub)

    def _add(self, sub: _Subscriber) -> None:
        with self._lock:
            if self._closed:
                raise RuntimeError("the service is stopping")
            self._subscribers.append(sub)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._main, name="watch-hub", daemon=True)
                self._thread.start()
        self._rearm.set()

    def _remove(self, sub: _Subscriber) -> None:
        with self._lock, contextlib.suppress(ValueError):
            self._subscribers.remove(sub)
        self._rearm.set()

    def _main(self) -> None:
        import time

        current: Any = None
        retry_at: float | None = None
        try:
            while not self._closed:
                if current is None or self._rearm.is_set() or (retry_at is not None and time.monotonic() >= retry_at):
                    current, made = self._swap(current)
                    retry_at = None if made else time.monotonic() + RETRY_S
                    if current is None:
                        self._rearm.wait(RETRY_S)
                        continue
                # Not stopped by the re-arm event: a watcher stopped drops what it caught.
                raw = current.watch(DEBOUNCE_MS, STEP_MS, TIMEOUT_MS, None)
                if isinstance(raw, set):
                    self._dispatch(raw)
        finally:
            if current is not None:
                with contextlib.suppress(Exception):
                    current.close()

    def _swap(self, old: Any) -> tuple[Any, bool]:
        """A watcher over every subscriber's roots that exist, made before *old* is
        read a last time and closed, and whether it was made. One that cannot be
        made (a root gone meanwhile, no inotify instance left) leaves *old* on
        (tried again shortly) and tells the subscribers still waiting why."""
        from watchfiles._rust_notify import RustNotify

        self._rearm.clear()
        with self._lock:
            subs = list(self._subscribers)
        paths = sorted({r for s in subs for r in s.roots if os.path.exists(r)})
        new = None
        if paths:
            try:
                new = RustNotify(paths, False, False, 300, True, True)
                self.armed += 1
            except (OSError, RuntimeError) as exc:
                logger.info("watcher not made (%s)", exc)
                for s in subs:
                    if not s.armed.is_set():
                        s.error = str(exc) or type(exc).__name__
                        s.armed.set()
                return old, False
        if old is not None:
            with contextlib.suppress(Exception):
                last = old.watch(STEP_MS, STEP_MS, 2 * STEP_MS, None)  # what it caught before the new one listened
                if isinstance(last, set):
                    self._dispatch(last)
            with contextlib.suppress(Exception):
                old.close()
        for s in subs:
            s.armed.set()
        return new, True

    def _dispatch(self, raw: set[tuple[int, str]]) -> None:
        from watchfiles import Change

        with self._lock:
            subs = list(self._subscribers)
        for s in subs:
            mine = {
                (Change(kind), path)
                for kind, path in raw
                if s.owns(path) and (s.accept is None or s.accept(Change(kind), path))
            }
            if mine:
                with contextlib.suppress(RuntimeError):  # its loop is closed: it is going
                    s.loop.call_soon_threadsafe(s.queue.put_nowait, mine)
