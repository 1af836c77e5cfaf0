"""A store opened on a thread of its own while an index run starts.

Only for a database the run creates: nothing is stored there, so nothing
has to be read before the first write, and opening it (importing pymilvus,
starting the Lite server, creating the collection: about 1.5 s) overlaps the
first embeddings instead of preceding them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any


class OpeningStore:
    """Stands for the store ``open_store`` returns; every use waits for it,
    and an error in opening is raised by that use."""

    def __init__(self, open_store: Callable[[], Any]) -> None:
        self._future: Future[Any] = Future()
        threading.Thread(target=self._open, args=(open_store,), name="memsearch-store-open", daemon=True).start()

    def _open(self, open_store: Callable[[], Any]) -> None:
        try:
            self._future.set_result(open_store())
        except BaseException as exc:  # noqa: BLE001 - raised again by the first use
            self._future.set_exception(exc)

    def result(self) -> Any:
        """The open store (blocks until it is)."""
        return self._future.result()

    def wait(self) -> None:
        """Wait until opening has ended, well or not (the owner then closes what opened)."""
        self._future.exception()

    # The write calls are looked up when the run starts, before the store is open.
    def insert(self, rows: list[dict[str, Any]]) -> int:
        return int(self.result().insert(rows))

    def upsert(self, rows: list[dict[str, Any]]) -> int:
        return int(self.result().upsert(rows))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.result(), name)
