"""The process settings of an index run (:mod:`memsearch_fast.index.process`): one
BLAS thread and the objects from before frozen while a run is under way, nested
runs sharing them, and the process as it was once the last one ends."""

from __future__ import annotations

import gc

import numpy as np
from threadpoolctl import threadpool_info

from memsearch_fast.index.process import index_settings


def blas_threads() -> list[int]:
    return [int(lib["num_threads"]) for lib in threadpool_info() if lib["user_api"] == "blas"]


def test_a_run_has_one_blas_thread_and_the_process_is_restored_after() -> None:
    np.ones((4, 4)) @ np.ones((4, 4))  # numpy's BLAS loaded
    before, threshold = blas_threads(), gc.get_threshold()
    assert before, "numpy's BLAS is not visible to threadpoolctl"
    frozen = gc.get_freeze_count()
    with index_settings():
        assert blas_threads() == [1] * len(before)
        assert gc.get_freeze_count() > frozen
        with index_settings():  # a second run meanwhile
            assert blas_threads() == [1] * len(before)
        assert blas_threads() == [1] * len(before)  # still the outer run's
    assert blas_threads() == before
    assert gc.get_freeze_count() == frozen and gc.get_threshold() == threshold
