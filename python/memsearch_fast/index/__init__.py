"""The write path: one module per stage, scan → chunk → dedup → embed → upsert
(+ flush), wired by :mod:`.run`; lazy sync (:mod:`.sync`) replays recorded
runs before a search; :mod:`.watch` turns file events into runs, and
:mod:`.watch_lock` keeps one watcher per database and root set.

Data flows one way and no stage imports a later one. The names below load
on first use, so a hook that only checks a watcher's lock (:mod:`.watch_lock`)
does not load the pipeline.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from memsearch_fast.index.report import IndexReport, NullProgress, Progress
    from memsearch_fast.index.run import run_index

__all__ = ["IndexReport", "NullProgress", "Progress", "run_index"]


def __getattr__(name: str) -> Any:
    if name == "run_index":
        return importlib.import_module("memsearch_fast.index.run").run_index
    if name in __all__:
        return getattr(importlib.import_module("memsearch_fast.index.report"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
