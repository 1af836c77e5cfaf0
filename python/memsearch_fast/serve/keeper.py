"""The collections the engine holds in memory: loaded on use, released when idle.

Milvus Lite holds every loaded collection whole in the engine's memory: about
40-50 MB each even for a few hundred rows, so each watched project cost the
engine about 55 MB for as long as the server lived. It loads a released
collection again by itself on the next search or query (50-230 ms for such a
collection), so releasing one that nobody uses is safe for every client.

The service calls :meth:`Keeper.touch` for each search it answers and each
run of its watchers. A loaded collection (and its ``_spans`` companion) that
the service has not used for ``MEMSEARCH_ENGINE_IDLE_S`` seconds (default
120; 0 keeps everything loaded) is released, unless an index or watch run
holds its writer lock or the service is still reading it into its in-memory
copy. One loaded by another process is given the same time from when the
keeper first sees it. The keeper looks only while something it saw may still
be loaded, so an idle server opens no connection to its engine.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable

logger = logging.getLogger("memsearch_fast.serve")

ENV_IDLE = "MEMSEARCH_ENGINE_IDLE_S"
DEFAULT_IDLE_S = 120.0
#: At most this long between two looks (a quarter of the idle time when that is shorter).
MAX_PERIOD_S = 30.0


def _base(name: str) -> str:
    from memsearch_fast.store.spans import SUFFIX

    return name[: -len(SUFFIX)] if name.endswith(SUFFIX) else name


class Keeper:
    """Releases the engine's idle collections (see the module's note), in a thread."""

    def __init__(
        self,
        engine_uri: str,
        db_path: str,
        idle_s: float,
        busy: Callable[[str], bool] = lambda _name: False,
    ) -> None:
        self.engine_uri = engine_uri
        self.db_path = db_path
        self.idle_s = idle_s
        self._busy = busy
        self._used: dict[str, float] = {}  # base collection -> last use (monotonic)
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._main, name="engine-keeper", daemon=True)
        #: Collections released so far (for ``memsearch status``).
        self.released = 0

    def start(self) -> Keeper:
        if self.idle_s > 0:
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
        period = max(0.05, min(MAX_PERIOD_S, self.idle_s / 4))
        while not self._stopped.is_set():
            self._wake.wait()  # nothing seen yet, or everything released: sleep until a use
            self._wake.clear()
            while not self._stopped.wait(period):
                try:
                    if not self.sweep():
                        break
                except Exception as exc:  # noqa: BLE001 - the engine may be going away; look again later
                    logger.info("engine keeper: %s", exc)

    def sweep(self, now: float | None = None) -> bool:
        """Release what has been idle long enough; whether anything is still loaded."""
        from pymilvus import MilvusClient

        client = MilvusClient(uri=self.engine_uri)
        try:
            return self._sweep(client, time.monotonic() if now is None else now)
        finally:
            with contextlib.suppress(Exception):
                client.close()

    def _sweep(self, client: object, now: float) -> bool:
        from pymilvus import MilvusClient

        assert isinstance(client, MilvusClient)
        loaded = [n for n in client.list_collections() if client.get_load_state(n)["state"].name == "Loaded"]
        left = False
        for name in loaded:
            base = _base(name)
            with self._lock:
                last = self._used.setdefault(base, now)  # another process's: idle from now
            if now - last < self.idle_s or self._busy(base) or self._writing(base):
                left = True
                continue
            client.release_collection(name)
            self.released += 1
            logger.info("released %s (idle %.0f s)", name, now - last)
        with self._lock:
            for base in [b for b in self._used if not any(_base(n) == b for n in loaded)]:
                del self._used[base]  # released, or dropped: forgotten until used again
        return left

    def _writing(self, collection: str) -> bool:
        """Whether an index or watch run holds the collection's writer lock."""
        from memsearch_fast.store.manifest import Manifest, manifest_path

        return Manifest(manifest_path(self.db_path, collection)).writer_running()
