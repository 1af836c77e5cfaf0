"""Server side: one process owns a Lite database and serves it on a private socket."""

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
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from memsearch_fast.errors import DatabaseDamagedError, StoreError, StoreUnavailableError, one_line
from memsearch_fast.lite import damage
from memsearch_fast.lite.embedded import drop_unimplemented
from memsearch_fast.lite.process import cmdline_args, endpoint_open, served_database
from memsearch_fast.lite.settings import ENV_MODE, HOST
from memsearch_fast.lite.sidecars import check_layout, open_lock, open_sidecar, sidecar_paths, writable_dir
from memsearch_fast.lite.sockets import address_uri, socket_file, socket_path
from memsearch_fast.lite.state import database_id, remove_state_if, write_state
from memsearch_fast.lite.version import milvus_lite_major

logger = logging.getLogger(__name__)


def count_connections(address: str) -> int | None:
    """Clients connected to ``address`` (Linux), or None when unknown."""
    path = socket_file(address)
    if path is not None:
        try:  # accepted connections carry the listening socket's path; state 03 is connected
            with open("/proc/net/unix", encoding="utf-8", errors="replace") as f:
                next(f, None)
                return sum(1 for line in f if line.rstrip("\n").endswith(" " + path) and line.split()[5] == "03")
        except (OSError, IndexError):
            return None
    hex_port = f":{int(address.rpartition(':')[2]):04X}"
    total = 0
    found = False
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(name, encoding="ascii") as f:
                next(f, None)
                for line in f:
                    parts = line.split()
                    if len(parts) > 3 and parts[1].endswith(hex_port) and parts[3] == "01":
                        total += 1
            found = True
        except OSError:
            continue
    return total if found else None


class _Activity:
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


class _Engine:
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
        _unlink_socket(self.address)

    def _stop(self) -> None:
        raise NotImplementedError


class _Lite3Engine(_Engine):
    """Milvus Lite 3.x: the Python engine behind a gRPC server in this process."""

    def __init__(self, db_path: str, activity: _Activity, listen: str) -> None:
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


def _make_interceptor(grpc: Any, activity: _Activity) -> Any:
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


class _Lite2Engine(_Engine):
    """Milvus Lite 2.x: its C++ server binary, listening on our socket (or a local TCP port)."""

    def __init__(self, db_path: str, listen: str) -> None:
        log_start = damage.log_size(db_path)
        probe = _server_spec(db_path, None)
        self._lock_path = probe._lock_path
        self._lock, self._own_lock = _engine_lock(self._lock_path, db_path)
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


def _unlink_socket(address: str) -> None:
    sock = socket_file(address)
    if sock is not None:
        with contextlib.suppress(OSError):
            os.unlink(sock)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def _warm_analyzer() -> None:
    """Load jieba's dictionary in the background so the first query does not wait."""
    try:
        import jieba

        jieba.setLogLevel(logging.WARNING)
        jieba.initialize()
    except Exception:  # noqa: BLE001 - jieba is optional
        pass


#: Extra services a server runs beside its engine: called with the database, the
#: engine's unix socket (None for a TCP engine), its pymilvus URI and the
#: callback that marks activity; returns an object with ``stop()``, or None.
Services = Callable[[str, "str | None", str, Callable[[], None]], Any]


def serve(
    db_path: str,
    idle: float,
    *,
    detach: bool = False,
    port: int | None = None,
    services: Services | None = None,
) -> int:
    """Run the server for ``db_path`` until idle for ``idle`` seconds or signalled.

    It listens on a private unix socket, or on 127.0.0.1:``port`` (TCP, no
    authentication; 0 picks a free port) when a port is given.
    """
    db_path = str(Path(db_path).expanduser().resolve())
    # Everything this process and its engine create (the database when it is
    # new, its journal, the record) is private to this user; an existing
    # database keeps its modes.
    os.umask(0o077)
    ready_w = None
    if detach:
        # Fork so the server is re-parented to init (no zombie in the spawner);
        # the launcher exits once the server has recorded itself as starting.
        ready_r, ready_w = os.pipe()
        if os.fork() != 0:
            os.close(ready_w)
            launched = os.read(ready_r, 1) == b"1"  # b"" if the server died first
            os._exit(0 if launched else 1)
        os.close(ready_r)
    pid = os.getpid()
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *_: stop.set())
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("pymilvus").setLevel(logging.CRITICAL)
    logging.getLogger("grpc._server").addFilter(drop_unimplemented)
    warnings.filterwarnings("ignore", category=UserWarning, module="jieba")
    try:
        write_state(db_path, {"pid": pid, "status": "starting", "db": db_path})
    except (OSError, StoreError) as exc:
        logger.error("cannot serve %s: %s", db_path, one_line(exc))
        return 1
    if ready_w is not None:
        os.write(ready_w, b"1")
        os.close(ready_w)
    activity = _Activity()
    log_offset = damage.log_size(db_path)  # where this server's (and its engine's) output starts
    try:
        check_layout(db_path)
        damage.check(db_path)
        major = milvus_lite_major()
        if port is None:
            listen = "unix:" + socket_path(db_path, pid)
            _unlink_socket(listen)  # only a dead server with our pid can have left it
        else:
            listen = f"{HOST}:{port}"
        engine: _Engine = (
            _Lite3Engine(db_path, activity, listen) if (major or 0) >= 3 else _Lite2Engine(db_path, listen)
        )
    except Exception as exc:  # noqa: BLE001 - reported through the record
        error = one_line(exc)
        found_damaged = isinstance(exc, DatabaseDamagedError)
        if damage.is_damage(error) and not found_damaged:
            cause = damage.log_cause(db_path, log_offset) or error
            damage.mark(db_path, cause)
            error, found_damaged = damage.message(db_path, cause), True
        write_state(db_path, {"pid": pid, "status": "error", "error": error, "damaged": found_damaged})
        logger.error("cannot open %s: %s", db_path, error)
        return 1
    import importlib.metadata

    service = (
        services(db_path, socket_file(engine.address), address_uri(engine.address), activity.touch)
        if services
        else None
    )
    db_id = database_id(db_path)  # the engine has opened (or created) it
    write_state(
        db_path,
        {
            "pid": pid,
            "status": "ready",
            "db": db_path,
            **({"db_id": db_id} if db_id is not None else {}),
            "address": engine.address,
            "uri": address_uri(engine.address),
            "engine": f"milvus-lite {importlib.metadata.version('milvus-lite')}",
            "engine_pid": engine.engine_pid,
            "started": time.time(),
            "idle_timeout": idle,
            "log_offset": log_offset,
            **({"search": service.address} if service is not None else {}),
        },
    )
    if isinstance(engine, _Lite3Engine):  # 2.x tokenises in its C++ engine
        threading.Thread(target=_warm_analyzer, daemon=True).start()
    started = time.monotonic()
    last_client = started
    poll = max(0.05, min(1.0, idle / 4))
    sock = socket_file(engine.address)
    sock_id = _inode(sock) if sock else None
    watch_log = _LogWatch(db_path, log_offset)
    damaged = ""
    try:
        while not stop.wait(poll):
            if engine.dead():
                logger.error("engine for %s exited", db_path)
                break
            damaged = watch_log.damage()
            if damaged:
                # A collection the engine could load only in part: serve nothing more.
                logger.error("%s", damage.message(db_path, damaged))
                break
            if sock and _inode(sock) != sock_id:
                # Removed (a temp cleaner): no new client could reach us, so make way for a new server.
                logger.warning("socket %s of %s was removed; exiting", sock, db_path)
                break
            if db_id is not None and database_id(db_path) != db_id:
                # Removed or replaced (rm to rebuild the index): what we hold is gone for
                # everyone else, and writes here would be lost. Clients re-attach to a new server.
                logger.warning("database %s was removed or replaced; exiting", db_path)
                break
            now = time.monotonic()
            conns = count_connections(engine.address)
            if conns:
                last_client = now
            if conns is None and not activity.known:
                last_client = max(last_client, started)  # nothing observable: idle since start
            if now - max(last_client, activity.last) < idle:
                continue
            if _idle_exit(db_path, pid, engine, activity, idle):
                break
    finally:
        remove_state_if(db_path, pid)
        if service is not None:
            service.stop()
        engine.stop()
        if damaged:
            damage.mark(db_path, damaged)  # once the engine has let go of the file
    return 0


class _LogWatch:
    """Reads what the engine writes to our log (its stdout and stderr) for a
    statement of damage: "Load data failed, errs: database disk image is malformed"."""

    def __init__(self, db_path: str, offset: int) -> None:
        self.db_path = db_path
        self.offset = offset

    def damage(self) -> str:
        if damage.log_size(self.db_path) == self.offset:
            return ""  # the usual case: one stat a poll
        text, self.offset = damage.read_log(self.db_path, self.offset)
        cause = damage.cause_in(text)
        return cause if cause and damage.is_damage(cause) else ""


def _inode(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _idle_exit(db_path: str, pid: int, engine: _Engine, activity: _Activity, idle: float) -> bool:
    """Withdraw the record and stop the engine under the broker lock, unless a
    client arrived meanwhile: a client that takes the lock next must find the
    database released, or the server it starts could not open it."""
    import fcntl

    try:
        fd = open_lock(sidecar_paths(db_path)["lock"])
    except (OSError, StoreError) as exc:
        logger.warning("cannot take the broker lock of %s: %s", db_path, one_line(exc))
        return False
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False  # someone is attaching right now
        if count_connections(engine.address) or time.monotonic() - activity.last < idle:
            return False
        remove_state_if(db_path, pid)
        engine.stop()
        return True
    finally:
        os.close(fd)
