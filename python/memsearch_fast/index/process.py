"""The process settings of an index run: one BLAS thread, the objects from before it frozen.

Both are process-wide and restored when the last run in the process ends (a
service may run several). Measured through the CLI at 50 MB of journals
(zero-cost vectors, docs/store.md, "The CLI's own CPU"): numpy's OpenBLAS
starts a thread a core, and between the span file's small projections they
spin, about 5 s of CPU where the products take under 1 s, on two cores shared
with the Milvus Lite engine. The objects alive before the run (modules, the
CLI's) are frozen, so the collector's full passes do not walk them again;
its thresholds stay CPython's, since cyclic garbage (an HTTP answer's 1 MB
body among it) lives until a pass: a young generation of 20,000 allocations
cost the run 200 MB.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator
from typing import Any


class _Settings:
    """The process's settings while runs are under way (nested runs share them)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._depth = 0
        self._blas: Any = None

    def enter(self) -> None:
        with self._lock:
            if self._depth == 0:
                self._blas = _blas_one_thread()
                gc.freeze()
            self._depth += 1

    def leave(self) -> None:
        with self._lock:
            self._depth -= 1
            if self._depth:
                return
            gc.unfreeze()
            blas, self._blas = self._blas, None
            blas.restore_original_limits()


_settings = _Settings()


@contextlib.contextmanager
def index_settings() -> Iterator[None]:
    """One BLAS thread, and the objects from before frozen, while the body runs."""
    _settings.enter()
    try:
        yield
    finally:
        _settings.leave()


def _blas_one_thread() -> Any:
    """The BLAS libraries loaded (numpy's) limited to one thread."""
    import numpy  # noqa: F401 - loads its BLAS, so the limit applies to it
    from threadpoolctl import threadpool_limits

    return threadpool_limits(limits=1, user_api="blas")
