"""The embedding models a database's service holds: one per model directory,
shared by its searches and its watchers' index runs.

Before, every watcher process and the search service each loaded their own
copy (about 200 MB apiece). Here a model is loaded on first use, lent to a
``MemSearch`` for one search or one index run (:meth:`Models.lend`), and
closed after :data:`~memsearch_fast.serve.search.DEFAULT_UNLOAD_S` seconds in
which nobody borrowed it.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator
from typing import Any


def fingerprint(model_dir: str) -> tuple[Any, ...]:
    """Identity of a model directory's files: a re-imported model is another model."""
    out: list[Any] = []
    for rel in ("tokenizer.json", "onnx/model_quantized.onnx", "onnx/model.onnx"):
        try:
            st = os.stat(os.path.join(model_dir, rel))
            out.append((st.st_ino, st.st_mtime_ns, st.st_size))
        except OSError:
            out.append(None)
    return tuple(out)


class _Named:
    """The shared provider under the name one borrower knows the model by: the
    name goes into chunk ids and the collection's record, the sessions do not."""

    def __init__(self, provider: Any, name: str) -> None:
        self._provider = provider
        self.model_name = name

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._provider, attr)


class _Loaded:
    def __init__(self, provider: Any, name: str, model_dir: str) -> None:
        self.provider = provider
        self.name = name
        self.names = {name}
        self.model_dir = model_dir
        self.users = 0
        self.last = time.monotonic()
        self.loaded_at = time.time()


class Models:
    """Loaded ONNX providers keyed by the directory's real path and its files'
    identity (a symlink and its target, or two names of one model, load it
    once); thread-safe."""

    def __init__(self, unload_after: float) -> None:
        self.unload_after = unload_after
        self._lock = threading.Lock()
        self._loaded: dict[tuple[Any, ...], _Loaded] = {}

    def _get(self, model_dir: str, model_name: str) -> _Loaded:
        real = os.path.realpath(model_dir)
        key = (real, fingerprint(real))
        with self._lock:
            entry = self._loaded.get(key)
            if entry is None:
                from memsearch_fast.embeddings import get_provider
                from memsearch_fast.parallelism import plan

                for old in [k for k in self._loaded if k[0] == real and not self._loaded[k].users]:
                    self._close(self._loaded.pop(old))  # the same model re-imported: the old files go
                provider = get_provider("onnx", model=real, model_name=model_name, parallelism=plan(None))
                entry = self._loaded[key] = _Loaded(provider, model_name, model_dir)
            entry.names.add(model_name)
            entry.users += 1
            return entry

    @contextlib.contextmanager
    def lend(self, ms: Any, model_dir: str, model_name: str) -> Iterator[Any]:
        """*ms* (a ``MemSearch`` of this model) embeds with the shared provider for the block."""
        entry = self._get(model_dir, model_name)
        provider = entry.provider if entry.provider.model_name == model_name else _Named(entry.provider, model_name)
        ms.provider = provider  # the facade opens its provider lazily: hand it ours
        try:
            yield provider
        finally:
            ms.provider = None  # never closed by ms.close(): it is the service's
            with self._lock:
                entry.users -= 1
                entry.last = time.monotonic()

    def unload_idle(self) -> bool:
        """Close the models nobody borrowed for ``unload_after`` seconds; whether any went."""
        now = time.monotonic()
        with self._lock:
            idle = [k for k, e in self._loaded.items() if not e.users and now - e.last > self.unload_after]
            for key in idle:
                self._close(self._loaded.pop(key))
        return bool(idle)

    def describe(self) -> list[dict[str, Any]]:
        with self._lock:
            return [
                {
                    "model": e.name,
                    "names": sorted(e.names),
                    "dir": e.model_dir,
                    "in_use": e.users,
                    "loaded_at": e.loaded_at,
                }
                for e in self._loaded.values()
            ]

    def close(self) -> None:
        with self._lock:
            for entry in self._loaded.values():
                self._close(entry)
            self._loaded.clear()

    @staticmethod
    def _close(entry: _Loaded) -> None:
        with contextlib.suppress(Exception):
            entry.provider.close()
