"""How many threads each pool gets, decided once per run.

One ``--workers N`` drives three pools: the Rust threads that read, chunk and
hash files, the ONNX inference workers (each with its own intra-op threads),
and the concurrent requests of an HTTP embedding provider. :func:`plan` is the
only place their defaults are resolved; every stage takes the numbers it gets.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

#: More single-threaded inference workers stop paying off past this many.
MAX_DEFAULT_INFERENCE_WORKERS = 4
#: Concurrent requests to an HTTP embedding provider when --workers is not given.
DEFAULT_REMOTE_REQUESTS = 4


def available_cpus() -> int:
    """Cores this process may use (respects CPU affinity and container cpusets)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


@dataclass(frozen=True)
class Parallelism:
    """The pool sizes of one run."""

    #: Rust threads reading, chunking and hashing files.
    chunk_threads: int
    #: ONNX inference workers (sessions running at once).
    inference_workers: int
    #: onnxruntime intra-op threads inside each inference worker.
    intra_op_threads: int
    #: Concurrent requests to an HTTP embedding provider.
    remote_requests: int

    @property
    def inference_threads(self) -> int:
        """Every inference core: what one session alone (the reranker) may use."""
        return self.inference_workers * self.intra_op_threads


def plan(workers: int | None = None, *, threads: int | None = None, cpus: int | None = None) -> Parallelism:
    """Resolve ``--workers`` (and an explicit intra-op ``threads``) against the CPUs.

    ``workers`` sets every pool: chunk threads, inference workers and HTTP
    requests. Unset, chunking uses every core, inference splits the cores
    into at most four single-threaded workers (several narrow sessions keep
    cores busier than one wide one on small models) and gives any remainder
    to intra-op threads, and HTTP providers keep four requests in flight.
    """
    for name, value in (("workers", workers), ("threads", threads)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    cpus = cpus or available_cpus()
    if workers is None:
        budget = cpus if threads is None else cpus // threads
        inference = max(1, min(MAX_DEFAULT_INFERENCE_WORKERS, budget))
    else:
        inference = workers
    return Parallelism(
        chunk_threads=workers or cpus,
        inference_workers=inference,
        intra_op_threads=threads or max(1, cpus // inference),
        remote_requests=workers or DEFAULT_REMOTE_REQUESTS,
    )
