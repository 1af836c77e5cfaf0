"""The engine a Lite server serves: Milvus Lite 3.x in this process behind a
gRPC server, or milvus-lite 2.x's C++ binary as a child, with the engine lock
2.x takes beside the database (so embedded openers see the database held).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Any

from memsearch_fast.errors import StoreUnavailableError, one_line
from memsearch_fast.lite import damage, pk_index
from memsearch_fast.lite.process import cmdline_args, endpoint_open, served_database
from memsearch_fast.lite.settings import ENV_MODE, HOST
from memsearch_fast.lite.sidecars import open_sidecar, writable_dir
from memsearch_fast.lite.sockets import socket_file
from memsearch_fast.lite.version import milvus_lite_major

logger = logging.getLogger(__name__)


class Activity:
    """Last-request clock plus a writer lock for engines that need one."""

    def __init__(self) -> None:
        self.last = time.monotonic()
        self.known = False  # whether requests are observed at all
        self.write_lock = threading.Lock()

    def touch(self) -> None:
        self.last = time.monotonic()


# RPCs that never mutate; everything else is serialized (Milvus Lite 3.x is
# single-writer per collection).
_READ_ONLY_RPCS = frozenset(
    {
        "Search",
        "HybridSearch",
        "Query",
        "DescribeCollection",
        "HasCollection",
        "ShowCollections",
        "GetCollectionStatistics",
        "GetLoadState",
        "GetLoadingProgress",
        "DescribeIndex",
        "GetVersion",
        "Connect",
        "CheckHealth",
        "ListDatabases",
        "DescribeDatabase",
        "ShowPartitions",
        "HasPartition",
        "GetPartitionStatistics",
        "ListAliases",
        "DescribeAlias",
        "GetIndexState",
        "GetIndexBuildProgress",
        "GetFlushState",
        "GetPersistentSegmentInfo",
        "GetQuerySegmentInfo",
        "ListResourceGroups",
        "RunAnalyzer",
        "AllocTimestamp",
    }
)


class Engine:
    address: str  # "unix:/path" or "host:port"
    engine_pid: int | None = None
    version: str = ""

    def dead(self) -> bool:
        return False

    def stop(self) -> None:
        """Stop once (idle exit stops under the lock, the caller again on the way out)."""
        if getattr(self, "_stopped", False):
            return
        self._stopped = True
        self._stop()
        unlink_socket(self.address)

    def _stop(self) -> None:
        raise NotImplementedError


class Lite3Engine(Engine):
    """Milvus Lite 3.x: the Python engine behind a gRPC server in this process."""

    def __init__(self, db_path: str, activity: Activity, listen: str) -> None:
        import grpc

        self.db: Any = None
        self.server: Any = None
        try:
            from concurrent import futures

            from milvus_lite.adapter.grpc.servicer import MilvusServicer
            from milvus_lite.db import MilvusLite
            from pymilvus.grpc_gen import milvus_pb2_grpc

            interceptor = _make_interceptor(grpc, activity)
            self.db = MilvusLite(db_path)
            self.server = grpc.server(
                futures.ThreadPoolExecutor(max_workers=8),
                interceptors=[interceptor],
                options=[
                    ("grpc.max_receive_message_length", 256 * 1024 * 1024),
                    ("grpc.max_send_message_length", 256 * 1024 * 1024),
                ],
            )
            milvus_pb2_grpc.add_MilvusServiceServicer_to_server(MilvusServicer(self.db), self.server)
            activity.known = True
        except ImportError:  # internals moved: use the public entry point, unguarded
            if self.db is not None:
                self.db.close()
            from milvus_lite.adapter.grpc.server import start_server_in_thread

            if socket_file(listen):
                raise StoreUnavailableError(
                    f"this milvus-lite {milvus_lite_major()}.x cannot be served on a unix socket; "
                    f"set {ENV_MODE}=embedded"
                ) from None
            host, _, port = listen.rpartition(":")
            self.server, self.db, bound = start_server_in_thread(data_dir=db_path, host=host, port=int(port))
            self.address = f"{host}:{bound}"
            return
        try:
            bound = self.server.add_insecure_port(listen)  # grpc raises RuntimeError when it cannot bind
        except RuntimeError as exc:
            self.db.close()
            raise StoreUnavailableError(f"cannot listen on {listen}: {one_line(exc)}") from None
        self.address = listen if socket_file(listen) else f"{listen.rpartition(':')[0]}:{bound}"
        self.server.start()

    def _stop(self) -> None:
        with contextlib.suppress(Exception):
            self.server.stop(grace=2).wait(5)
        self.db.close()


def _make_interceptor(grpc: Any, activity: Activity) -> Any:
    class _Guard(grpc.ServerInterceptor):  # type: ignore[misc]  # grpc is untyped (Any)
        def intercept_service(self, continuation: Any, details: Any) -> Any:
            activity.touch()
            handler = continuation(details)
            method = details.method.rsplit("/", 1)[-1]
            if handler is None or handler.unary_unary is None or method in _READ_ONLY_RPCS:
                return handler
            inner = handler.unary_unary

            def guarded(request: Any, context: Any) -> Any:
                with activity.write_lock:
                    try:
                        return inner(request, context)
                    finally:
                        activity.touch()

            return grpc.unary_unary_rpc_method_handler(
                guarded,
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )

    return _Guard()


class Lite2Engine(Engine):
    """Milvus Lite 2.x: its C++ server binary, listening on our socket (or a local TCP port)."""

    def __init__(self, db_path: str, listen: str, tables: tuple[str, ...] = ()) -> None:
        log_start = damage.log_size(db_path)
        probe = _server_spec(db_path, None)
        self._lock_path = probe._lock_path
        self._lock, self._own_lock = _engine_lock(self._lock_path, db_path)
        self.tables = tables
        if self._lock is not None:  # no engine has the file: its tables may be indexed
            started = time.perf_counter()
            indexed = pk_index.prepare(db_path, tables)
            if indexed:
                logger.info(
                    "indexed the primary keys of %s in %.1f s", ", ".join(indexed), time.perf_counter() - started
                )
        last_error = "did not listen"
        any_port = listen.endswith(":0")
        for _ in range(3 if any_port else 1):
            address = f"{HOST}:{_free_port()}" if any_port else listen
            srv = _server_spec(db_path, address)
            env = os.environ.copy()
            libdir = str(srv._bin_path)
            env["LD_LIBRARY_PATH"] = libdir + os.pathsep + env.get("LD_LIBRARY_PATH", "")
            env["DYLD_LIBRARY_PATH"] = libdir + os.pathsep + env.get("DYLD_LIBRARY_PATH", "")
            self.proc = subprocess.Popen(
                [str(a) for a in srv.args],
                env=env,
                cwd=str(srv._work_dir),
                stdin=subprocess.DEVNULL,
                preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,  # noqa: PLW1509
            )
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and self.proc.poll() is None:
                if endpoint_open(address, timeout=0.2):
                    self.address = address
                    self.engine_pid = self.proc.pid
                    return
                time.sleep(0.02)
            last_error = f"exit code {self.proc.poll()}"
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()
            self.proc.wait()
        self._release()
        # The engine says why only in its output (our log): "Create table
        # failed, errs: database disk image is malformed".
        cause = damage.log_cause(db_path, log_start)
        if cause:
            raise StoreUnavailableError(f"{cause} (the Milvus Lite 2.x engine failed to start: {last_error})")
        raise StoreUnavailableError(f"Milvus Lite 2.x server for {db_path} failed to start ({last_error})")

    def dead(self) -> bool:
        return self.proc.poll() is not None

    def _stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._release()

    def _release(self) -> None:
        if self._lock is not None:
            with contextlib.suppress(OSError):
                os.close(self._lock)
        if self._own_lock:
            with contextlib.suppress(OSError):
                os.unlink(self._lock_path)


def _engine_lock(path: str, db_path: str) -> tuple[int | None, bool]:
    """Take the lock milvus-lite 2.x takes (``.<name>.lock`` beside the database),
    so embedded users see the database as held: ``(fd, ours to remove)``.

    Exclusive, on a file opened as a sidecar (never through a planted link).
    In a directory this user cannot write, the engine can only read the
    database (SQLite cannot create its journal there): a shared lock on the
    file if it exists, which fails while a writer holds it, else none (no
    writer could have created it there).

    A server of a database removed under it (rm to rebuild) holds the lock
    until it notices and exits, and removes the lock file as it goes: its
    successor waits for it (never for anyone else's lock) and locks the file
    that is at the path once it has the lock.
    """
    deadline = time.monotonic() + PREDECESSOR_WAIT_S
    while True:
        fd, mode, own = _open_engine_lock(path)
        if fd is None:
            return None, False
        try:
            taken = _try_lock(fd, mode, path)
        except BaseException:
            os.close(fd)
            raise
        if taken:
            return fd, own
        waiting = time.monotonic() < deadline and _predecessor(fd, db_path)
        os.close(fd)
        if not waiting:
            raise StoreUnavailableError(f"{db_path} is open in another process")
        time.sleep(0.1)


def _open_engine_lock(path: str) -> tuple[int | None, int, bool]:
    import fcntl

    try:
        return open_sidecar(path, os.O_CREAT | os.O_RDWR | os.O_APPEND), fcntl.LOCK_EX, True
    except OSError as exc:
        if exc.errno not in (errno.EACCES, errno.EPERM, errno.EROFS) or writable_dir(os.path.dirname(path)):
            raise
        try:
            return os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC), fcntl.LOCK_SH, False
        except OSError:
            return None, 0, False  # absent (or unreadable): nobody writes the database here


def _try_lock(fd: int, mode: int, path: str) -> bool:
    """Lock *fd*; False when another holds it, or when the file left its path
    while we waited (then the path's new file is what others will lock)."""
    import fcntl

    try:
        fcntl.lockf(fd, mode | fcntl.LOCK_NB)
    except OSError:
        return False
    try:
        now = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (held.st_dev, held.st_ino) == (now.st_dev, now.st_ino)


#: How long a new server waits for the engine lock held by a server of ours on
#: its way out (it checks its database at least once a second).
PREDECESSOR_WAIT_S = 15.0


def _predecessor(fd: int, db_path: str) -> bool:
    """Whether the lock on *fd*'s file is held by a Lite server of ours for
    *db_path*, or by no one any more (Linux: ``/proc/locks`` and the holder's
    command line); False where that cannot be told."""
    st = os.fstat(fd)
    key = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    try:
        with open("/proc/locks", encoding="ascii", errors="replace") as f:
            holders = [int(p[4]) for p in (line.split() for line in f) if len(p) > 5 and p[5] == key and p[4].isdigit()]
    except OSError:
        return False
    if not holders:
        return True  # released since we tried: try again
    for pid in holders:
        args = cmdline_args(pid)
        if not args:
            return True  # exited since (or unknown: waiting is bounded)
        served = served_database(args)
        if served is not None and served[0] == db_path:
            return True
    return False


def _server_spec(db_path: str, address: str | None) -> Any:
    """milvus-lite 2.x's ``Server`` for its paths and engine arguments only.

    Its ``__del__`` removes the engine's lock file: as soon as the object is
    collected, which left the database looking free to an embedded opener
    while this server's engine had it open.
    """
    from milvus_lite.server import Server

    class _Spec(Server):  # type: ignore[misc]  # milvus-lite is untyped (Any)
        def __del__(self) -> None:
            pass

    return _Spec(db_path, address)


def _die_with_parent() -> None:
    """In the 2.x engine child: get SIGKILL when the serving process dies (Linux)."""
    import ctypes

    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def unlink_socket(address: str) -> None:
    sock = socket_file(address)
    if sock is not None:
        with contextlib.suppress(OSError):
            os.unlink(sock)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])
