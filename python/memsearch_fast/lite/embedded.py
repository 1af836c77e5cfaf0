"""Embedded mode: the Lite engine inside this process, shared by its stores."""

from __future__ import annotations

import logging
import threading

# Embedded Lite engines are per path and per process, shared by every store
# (and pymilvus client) on that path: release one only when its last store closes.
_EMBEDDED_REFS: dict[str, int] = {}


_EMBEDDED_LOCK = threading.Lock()


def drop_unimplemented(record: logging.LogRecord) -> bool:
    """Logging filter hiding grpc's traceback for RPCs Milvus Lite does not implement.

    pymilvus probes optional RPCs (e.g. AllocTimestamp for iterators) and
    falls back; the in-process gRPC server would print a traceback for each.
    """
    exc = record.exc_info[1] if record.exc_info else None
    return not isinstance(exc, NotImplementedError)


def _quiet_grpc_server() -> None:
    log = logging.getLogger("grpc._server")
    if drop_unimplemented not in log.filters:
        log.addFilter(drop_unimplemented)


def _quiet_lite_embedded() -> None:
    """Silence the in-process engine's tracebacks (held database, failed request).

    Each failure reaches the store as an error it reports in one line; in
    server mode the same logs go to the server's log file instead.
    """
    log = logging.getLogger("milvus_lite")
    if log.level == logging.NOTSET:
        log.setLevel(logging.CRITICAL)
