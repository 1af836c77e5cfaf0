"""The collections the engine holds in memory: loaded on use, released when idle.

Milvus Lite holds every loaded collection whole in the engine's memory: about
40-50 MB each even for a few hundred rows, so each watched project cost the
engine about 55 MB for as long as the server lived. It loads a released
collection again by itself on the next search or query (50-230 ms for such a
collection), so releasing one that nobody uses is safe for every client.

The service calls :meth:`Keeper.touch` for each search it answers and each
run of its watchers. A loaded collection (and its ``_spans`` companion) is
released when the service has not used it for ``MEMSEARCH_ENGINE_IDLE_S``
seconds (default 120; 0 keeps everything loaded), or at once (a few seconds
after its last use) when ``MEMSEARCH_ENGINE_LOADED`` (default 3; 0: no cap)
collections used more recently are loaded; never while an index or watch
run holds its writer lock or the service is still reading it into its
in-memory copy. One loaded by another process counts as used when the keeper
first sees it. The keeper looks only while something it saw may still be
loaded, so an idle server opens no connection to its engine.
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
from collections.abc import Callable
from typing import Any

logger = logging.getLogger("memsearch_fast.serve")

ENV_IDLE = "MEMSEARCH_ENGINE_IDLE_S"
DEFAULT_IDLE_S = 120.0
ENV_LOADED = "MEMSEARCH_ENGINE_LOADED"
DEFAULT_LOADED = 3
#: At most this long between two looks (a quarter of the idle time when that is shorter).
MAX_PERIOD_S = 30.0
#: A collection past the cap is released no sooner than this after its last use.
MIN_IDLE_S = 2.0


def _base(name: str) -> str:
    from memsearch_fast.store.spans.collection import SUFFIX

    return name[: -len(SUFFIX)] if name.endswith(SUFFIX) else name


class Keeper:
    """Releases the engine's idle collections (see the module's note), in a thread."""

    def __init__(
        self,
        engine_uri: str,
        db_path: str,
        idle_s: float,
        busy: Callable[[str], bool] = lambda _name: False,
        loaded: int = DEFAULT_LOADED,
    ) -> None:
        self.engine_uri = engine_uri
        self.db_path = db_path
        #: Seconds unused before a collection is released; 0: never for being idle.
        self.idle_s = idle_s
        self._idle = idle_s if idle_s > 0 else math.inf
        #: The most collections (with their spans) kept loaded; 0: no cap.
        self.loaded = max(0, loaded)
        self._period = max(0.05, min(MAX_PERIOD_S, self._idle / 4))
        self._busy = busy
        self._used: dict[str, float] = {}  # base collection -> last use (monotonic)
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._main, name="engine-keeper", daemon=True)
        #: Collections released so far (for ``memsearch status``).
        self.released = 0
        self._soonest = float("inf")  # when the last look found the next one due

    @classmethod
    def from_env(cls, engine_uri: str, db_path: str, busy: Callable[[str], bool]) -> Keeper:
        """A keeper with ``MEMSEARCH_ENGINE_IDLE_S`` and ``MEMSEARCH_ENGINE_LOADED`` (0 turns either off)."""
        from memsearch_fast.config import environment

        return cls(
            engine_uri,
            db_path,
            environment.number(ENV_IDLE, DEFAULT_IDLE_S),
            busy,
            environment.integer(ENV_LOADED, DEFAULT_LOADED),
        )

    def start(self) -> Keeper:
        if self.idle_s > 0 or self.loaded > 0:
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stopped.set()
        self._wake.set()

    def touch(self, collection: str) -> None:
        """*collection* (or its spans) is in use now."""
        with self._lock:
            self._used[_base(collection)] = time.monotonic()
        self._wake.set()

    def _main(self) -> None:
        next_at: float | None = None  # when to look next; None: nothing seen loaded
        while not self._stopped.is_set():
            self._wake.wait(None if next_at is None else max(0.0, next_at - time.monotonic()))
            self._wake.clear()
            now = time.monotonic()
            if self._stopped.is_set():
                return
            if not self._crowded(now) and (next_at is None or now < next_at):
                next_at = next_at or now + self._period  # a use: look within a period
                continue
            self._soonest = float("inf")
            try:
                left = self.sweep()
            except Exception as exc:  # noqa: BLE001 - the engine may be going away; look again later
                logger.info("engine keeper: %s", exc)
                left = True
            next_at = min(time.monotonic() + self._period, self._soonest) if left else None

    def _crowded(self, now: float) -> bool:
        """More collections used lately than the cap allows loaded."""
        with self._lock:
            recent = sum(1 for last in self._used.values() if now - last < self._idle)
        return 0 < self.loaded < recent

    def sweep(self, now: float | None = None) -> bool:
        """Release what has been idle long enough; whether anything is still loaded."""
        from pymilvus import MilvusClient

        from memsearch_fast.store.compat import local_channel_kwargs

        client = MilvusClient(uri=self.engine_uri, **local_channel_kwargs())
        try:
            return self._sweep(client, time.monotonic() if now is None else now)
        finally:
            with contextlib.suppress(Exception):
                client.close()

    def _sweep(self, client: Any, now: float) -> bool:
        loaded = [n for n in client.list_collections() if client.get_load_state(n)["state"].name == "Loaded"]
        with self._lock:
            for name in loaded:
                self._used.setdefault(_base(name), now)  # another process's: used when first seen
            recent = sorted(self._used, key=self._used.__getitem__, reverse=True)
        kept = set(recent[: self.loaded]) if self.loaded else set(recent)
        left = False
        for name in loaded:
            base = _base(name)
            idle = now - self._used.get(base, now)
            due = idle >= self._idle or (base not in kept and idle >= MIN_IDLE_S)
            if not due or self._busy(base) or self._writing(base):
                left = True
                if not due:  # look again when it falls due, if that comes before the next period
                    wait = (MIN_IDLE_S if base not in kept else self._idle) - idle
                    self._soonest = min(self._soonest, time.monotonic() + max(0.05, wait))
                continue
            client.release_collection(name)
            self.released += 1
            logger.info("released %s (idle %.0f s)", name, idle)
        with self._lock:
            for base in [b for b in self._used if not any(_base(n) == b for n in loaded)]:
                del self._used[base]  # released, or dropped: forgotten until used again
        return left

    def _writing(self, collection: str) -> bool:
        """Whether an index or watch run holds the collection's writer lock."""
        from memsearch_fast.store.manifest import Manifest, manifest_path

        return Manifest(manifest_path(self.db_path, collection)).writer_running()
