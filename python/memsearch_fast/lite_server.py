"""One process owns a Milvus Lite database and serves every other process.

Milvus Lite lets one process at a time open a database, but agents run
``memsearch search`` while ``watch`` or ``index`` runs on the same one. For a
local database the store therefore connects through a small broker:

1. take an exclusive ``flock`` on ``<db>.lock`` (held only while attaching);
2. read ``<db>.server.json``; if the recorded server is alive (pid, command
   line, socket answering) connect to it;
3. otherwise clean up the stale record and spawn a detached
   ``python -m memsearch_fast.lite_server serve <db>`` that opens the database,
   listens on a unix socket in a directory only this user may enter, and
   records pid + socket, then connect.

The server exits after ``MEMSEARCH_LITE_IDLE_TIMEOUT`` seconds (default 600)
with no client connected and no request. It keeps collections loaded, so a
new CLI process searches a warm index instead of reloading it. A killed
server leaves its record behind; the next attach sees the dead pid and starts
a new server, which recovers the database from its write-ahead log.

``MEMSEARCH_LITE_MODE=embedded`` opens the database inside the calling
process instead (one process at a time, as plain pymilvus does).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import signal
import socket
import subprocess
import stat
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from memsearch_fast.store import (
    StoreError,
    StoreUnavailableError,
    drop_unimplemented,
    milvus_lite_major,
    one_line,
)

logger = logging.getLogger(__name__)

ENV_MODE = "MEMSEARCH_LITE_MODE"
ENV_IDLE = "MEMSEARCH_LITE_IDLE_TIMEOUT"
ENV_START = "MEMSEARCH_LITE_START_TIMEOUT"
DEFAULT_IDLE_TIMEOUT = 600.0
DEFAULT_START_TIMEOUT = 120.0
HOST = "127.0.0.1"
_SERVER_MARK = "memsearch_fast.lite_server"

_T = TypeVar("_T")


# -- configuration and file layout -------------------------------------------------------


def lite_mode() -> str:
    """``server`` (shared through one process) or ``embedded`` (in this process)."""
    mode = os.environ.get(ENV_MODE, "").strip().lower()
    if mode in ("server", "embedded"):
        return mode
    if mode:
        logger.warning("ignoring %s=%r (expected 'server' or 'embedded')", ENV_MODE, mode)
    return "server" if os.name == "posix" else "embedded"


def _env_seconds(name: str, default: float) -> float:
    try:
        value = float(os.environ.get(name, default))
    except ValueError:
        return default
    return value if value > 0 else default


def idle_timeout() -> float:
    return _env_seconds(ENV_IDLE, DEFAULT_IDLE_TIMEOUT)


def _socket_dirs() -> list[Path]:
    """Where sockets may live: the temp dir, else /tmp when that path is too long.

    Not ``$XDG_RUNTIME_DIR``: it is removed at the last logout while a server
    kept busy by ``watch`` lives on.
    """
    dirs = [Path(tempfile.gettempdir()) / f"memsearch-{os.geteuid()}", Path("/tmp") / f"memsearch-{os.geteuid()}"]
    return list(dict.fromkeys(dirs))


def _private_dir(d: Path) -> Path:
    """Create or check ``d`` as a 0700 directory of this user (not a symlink)."""
    d.mkdir(mode=0o700, exist_ok=True)
    st = os.lstat(d)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
        raise OSError(f"{d} is not a directory owned by this user")
    if stat.S_IMODE(st.st_mode) != 0o700:
        os.chmod(d, 0o700)
    return d


def socket_dir() -> Path:
    """A directory only this user can enter, for the servers' sockets.

    A socket's own mode is not a reliable guard on every system; a 0700
    directory is, so no other local user can reach a database through it.
    """
    return Path(socket_path("", 0)).parent


def socket_path(db_path: str, pid: int) -> str:
    """The unix socket of server ``pid`` for ``db_path``.

    Named per server instance, so a server on its way out can never remove
    the socket of its successor; sun_path holds ~107 bytes, so long temp
    dirs fall back to /tmp.
    """
    name = f"{hashlib.sha256(db_path.encode('utf-8', 'surrogateescape')).hexdigest()[:16]}-{pid}.sock"
    problem = ""
    for d in _socket_dirs():
        path = d / name
        if len(os.fsencode(path)) > 100:
            problem = f"{path} is too long for a unix socket"
            continue
        try:
            return str(_private_dir(d) / name)
        except OSError as exc:
            problem = one_line(exc)
    raise StoreUnavailableError(f"no private directory for the Milvus Lite server's socket: {problem}")


def _socket_file(address: str | None) -> str | None:
    """The socket path of a ``unix:/path`` address; None for ``host:port``."""
    return address[len("unix:") :] if address and address.startswith("unix:") else None


def _own_socket(address: str | None) -> str | None:
    """The path of ``address`` when it is a socket in one of our socket dirs
    (only those may be removed on a dead server's behalf)."""
    sock = _socket_file(address)
    if sock is None:
        return None
    path = Path(sock)
    ours = path.suffix == ".sock" and path.parent in _socket_dirs()
    return sock if ours else None


def _uri(address: str) -> str:
    """pymilvus URI of a server address (``unix:/path`` or ``host:port``)."""
    return address if _socket_file(address) else f"http://{address}"


def _address(st: dict[str, Any]) -> str | None:
    """Where a recorded server listens (records of older versions name only a port)."""
    address = st.get("address")
    if isinstance(address, str):
        return address
    port = st.get("port")
    return f"{HOST}:{port}" if isinstance(port, int) else None


def sidecar_paths(db_path: str) -> dict[str, str]:
    """Files kept beside the database: broker lock, server record, server log."""
    return {"lock": db_path + ".lock", "state": db_path + ".server.json", "log": db_path + ".server.log"}


def check_layout(db_path: str) -> None:
    """Refuse a database written by the other Milvus Lite generation, with advice."""
    major = milvus_lite_major()
    if major is None:
        raise StoreUnavailableError("milvus-lite is not installed; install it or use a Milvus server URI")
    p = Path(db_path)
    if major >= 3 and p.is_file():
        raise StoreError(
            f"{db_path} is a Milvus Lite 2.x database file but milvus-lite {major}.x is installed; "
            "move it aside and run 'memsearch index', or install milvus-lite<3"
        )
    if major < 3 and p.is_dir():
        raise StoreError(
            f"{db_path} is a Milvus Lite 3.x database directory but milvus-lite {major}.x is installed; "
            "move it aside and run 'memsearch index', or install milvus-lite>=3"
        )


# -- small process/file helpers ------------------------------------------------------------


@contextlib.contextmanager
def _flock(path: str, timeout: float) -> Iterator[None]:
    """Exclusive advisory lock on ``path``, waiting at most ``timeout`` seconds."""
    import fcntl

    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o644)
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise StoreUnavailableError(
                        f"timed out after {timeout:.0f}s waiting for {path} (another memsearch process is starting "
                        "the database server)"
                    ) from None
                time.sleep(0.02)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def read_state(db_path: str) -> dict[str, Any] | None:
    """The recorded server for ``db_path`` (may be stale), or None."""
    try:
        with open(sidecar_paths(db_path)["state"], encoding="utf-8") as f:
            data = json.load(f)
        return data if isinstance(data, dict) else None
    except (OSError, ValueError):
        return None


def _write_state(db_path: str, data: dict[str, Any]) -> None:
    """Atomically replace the server record."""
    target = sidecar_paths(db_path)["state"]
    tmp = f"{target}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f)
    os.replace(tmp, target)


def _remove_state_if(db_path: str, pid: int) -> None:
    st = read_state(db_path)
    if st is not None and st.get("pid") == pid:
        with contextlib.suppress(OSError):
            os.unlink(sidecar_paths(db_path)["state"])


def _pid_alive(pid: Any) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie is dead for our purposes
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            return f.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:
        return True


def _cmdline(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode("utf-8", "replace")
    except FileNotFoundError:
        return ""
    except OSError:
        pass
    try:
        out = subprocess.run(["ps", "-o", "command=", "-p", str(pid)], capture_output=True, text=True, timeout=5)
        return out.stdout
    except (OSError, subprocess.SubprocessError):
        return None


def _is_ours(pid: Any, db_path: str, mark: str = _SERVER_MARK) -> bool:
    """Alive and running ``mark`` on ``db_path`` (guards against pid reuse)."""
    if not _pid_alive(pid):
        return False
    cmd = _cmdline(pid)
    return cmd is None or (mark in cmd and db_path in cmd)


def _endpoint_open(address: str | None, timeout: float = 1.0) -> bool:
    """Whether a server accepts connections at ``address`` (``unix:/path`` or ``host:port``)."""
    if not address:
        return False
    try:
        sock = _socket_file(address)
        if sock is not None:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.settimeout(timeout)
                s.connect(sock)
            return True
        host, _, port = address.rpartition(":")
        with socket.create_connection((host, int(port)), timeout=timeout):
            return True
    except (OSError, ValueError):
        return False


def _terminate(pid: int, grace: float = 5.0) -> None:
    """SIGTERM, then SIGKILL after ``grace`` seconds."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while _pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if _pid_alive(pid):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 5
        while _pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)


def _log_tail(db_path: str) -> str:
    """Last meaningful line of the server log, for one-line error messages."""
    try:
        with open(sidecar_paths(db_path)["log"], "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 4096))
            lines = [ln.strip() for ln in f.read().decode("utf-8", "replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return one_line(lines[-1]) if lines else ""


# -- client side: attach -------------------------------------------------------------------


def server_status(db_path: str) -> dict[str, Any] | None:
    """The live server record for ``db_path``, or None when no server is running."""
    db_path = str(Path(db_path).expanduser().resolve())
    st = read_state(db_path)
    if st and st.get("status") == "ready" and _is_ours(st.get("pid"), db_path) and _endpoint_open(_address(st)):
        return st
    return None


def attach(db_path: str, connect: Callable[[str], _T], *, start_timeout: float | None = None) -> _T:
    """Connect to the server owning ``db_path``, starting one if needed.

    ``connect(uri)`` runs while the broker lock is held, so the server cannot
    reach its idle exit between being found and being connected to.
    """
    db_path = str(Path(db_path).expanduser().resolve())
    start_timeout = start_timeout or _env_seconds(ENV_START, DEFAULT_START_TIMEOUT)
    try:
        Path(db_path).parent.mkdir(parents=True, exist_ok=True)
        return _attach_locked(db_path, connect, start_timeout)
    except OSError as exc:
        raise StoreUnavailableError(f"cannot use Milvus Lite database {db_path}: {one_line(exc)}") from None


def _attach_locked(db_path: str, connect: Callable[[str], _T], start_timeout: float) -> _T:
    paths = sidecar_paths(db_path)
    with _flock(paths["lock"], timeout=start_timeout + 30):
        st = read_state(db_path)
        if st and st.get("status") == "starting" and _is_ours(st.get("pid"), db_path):
            st = _wait_ready(db_path, st["pid"], start_timeout)  # a spawner died mid-start
        if st and st.get("status") == "ready" and _is_ours(st.get("pid"), db_path):
            if _endpoint_open(_address(st)):
                try:
                    return connect(st["uri"])
                except Exception as exc:  # noqa: BLE001 - decided below
                    if _endpoint_open(_address(st)) and _pid_alive(st.get("pid")):
                        raise StoreUnavailableError(
                            f"Milvus Lite server for {db_path} (pid {st['pid']}) refused the connection: {one_line(exc)}"
                        ) from None
            else:
                uid = _pid_uid(st["pid"])
                if uid is not None and uid != os.geteuid():
                    raise StoreUnavailableError(
                        f"the Milvus Lite server for {db_path} (pid {st['pid']}) runs as another user (uid {uid}); "
                        "use memsearch as that user, or stop that server"
                    )
                logger.warning("Milvus Lite server pid %s for %s is not answering; restarting it", st["pid"], db_path)
        if st:
            _cleanup(db_path, st)
        st = _spawn(db_path, start_timeout)
        try:
            return connect(st["uri"])
        except Exception as exc:  # noqa: BLE001
            raise StoreUnavailableError(
                f"cannot connect to the Milvus Lite server for {db_path}: {one_line(exc)}"
            ) from None


def _cleanup(db_path: str, st: dict[str, Any]) -> None:
    """Stop what is left of a dead or hung server and forget it."""
    pid = st.get("pid")
    if isinstance(pid, int) and _is_ours(pid, db_path):
        _terminate(pid)
    engine_pid = st.get("engine_pid")
    if isinstance(engine_pid, int) and _is_ours(engine_pid, db_path, mark="milvus"):
        _terminate(engine_pid)  # a 2.x engine orphaned where parent-death signals do not exist
    sock = _own_socket(_address(st))
    if sock is not None and not _pid_alive(pid):
        with contextlib.suppress(OSError):
            os.unlink(sock)
    with contextlib.suppress(OSError):
        os.unlink(sidecar_paths(db_path)["state"])


def _pid_uid(pid: Any) -> int | None:
    """The user a process runs as (Linux), or None when unknown."""
    try:
        return os.stat(f"/proc/{int(pid)}").st_uid
    except (OSError, TypeError, ValueError):
        return None


def _spawn(db_path: str, start_timeout: float) -> dict[str, Any]:
    """Start a detached server for ``db_path`` and wait until it serves."""
    paths = sidecar_paths(db_path)
    env = os.environ.copy()
    pkg_root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (pkg_root, env.get("PYTHONPATH", "")) if p)
    env.pop(ENV_MODE, None)
    cmd = [sys.executable, "-m", _SERVER_MARK, "serve", "--detach", "--idle-timeout", str(idle_timeout()), db_path]
    try:  # keep the log bounded: start afresh once it passes 1 MB
        mode = "wb" if os.path.getsize(paths["log"]) > 1 << 20 else "ab"
    except OSError:
        mode = "ab"
    with open(paths["log"], mode) as log:
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
            close_fds=True,
            env=env,
            cwd=str(Path(db_path).parent),
        )
    try:
        rc = proc.wait(timeout=30)  # the launcher forks the server and exits at once
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise StoreUnavailableError(f"Milvus Lite server launcher for {db_path} hung") from None
    if rc != 0:
        raise StoreUnavailableError(f"cannot start the Milvus Lite server for {db_path}: {_log_tail(db_path)}")
    return _wait_ready(db_path, None, start_timeout)


def _wait_ready(db_path: str, pid: int | None, start_timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + start_timeout
    delay = 0.005
    seen_pid = pid
    while time.monotonic() < deadline:
        st = read_state(db_path)
        if st:
            seen_pid = st.get("pid", seen_pid)
            if st.get("status") == "ready":
                return st
            if st.get("status") == "error":
                with contextlib.suppress(OSError):
                    os.unlink(sidecar_paths(db_path)["state"])
                raise StoreUnavailableError(f"cannot open Milvus Lite database {db_path}: {st.get('error')}")
        if seen_pid is not None and not _pid_alive(seen_pid):
            raise StoreUnavailableError(
                f"Milvus Lite server for {db_path} exited while starting: {_log_tail(db_path) or 'see the .server.log'}"
            )
        time.sleep(delay)
        delay = min(delay * 2, 0.05)
    if seen_pid is not None:
        _terminate(seen_pid)
    raise StoreUnavailableError(f"Milvus Lite server for {db_path} did not start within {start_timeout:.0f}s")


def stop_server(db_path: str, timeout: float = 10.0) -> bool:
    """Stop the server owning ``db_path``; True when one was running."""
    db_path = str(Path(db_path).expanduser().resolve())
    st = read_state(db_path)
    if not st:
        return False
    pid = st.get("pid")
    running = False
    if isinstance(pid, int) and _is_ours(pid, db_path):
        running = True
        _terminate(pid, grace=timeout)
    _cleanup(db_path, st)
    return running


# -- server side ----------------------------------------------------------------------------


def _count_connections(address: str) -> int | None:
    """Clients connected to ``address`` (Linux), or None when unknown."""
    path = _socket_file(address)
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

            if _socket_file(listen):
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
        self.address = listen if _socket_file(listen) else f"{listen.rpartition(':')[0]}:{bound}"
        self.server.start()

    def _stop(self) -> None:
        with contextlib.suppress(Exception):
            self.server.stop(grace=2).wait(5)
        self.db.close()


def _make_interceptor(grpc: Any, activity: _Activity) -> Any:
    class _Guard(grpc.ServerInterceptor):
        def intercept_service(self, continuation, details):  # noqa: ANN001, ANN202
            activity.touch()
            handler = continuation(details)
            method = details.method.rsplit("/", 1)[-1]
            if handler is None or handler.unary_unary is None or method in _READ_ONLY_RPCS:
                return handler
            inner = handler.unary_unary

            def guarded(request, context):  # noqa: ANN001, ANN202
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
        import fcntl

        from milvus_lite.server import Server

        probe = Server(db_path, None)
        # The same lock milvus-lite 2.x takes, so embedded users see it as held.
        self._lock = open(probe._lock_path, "a")  # noqa: SIM115 - held for the server's life
        try:
            fcntl.lockf(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            self._lock.close()
            raise StoreUnavailableError(f"{db_path} is open in another process") from None
        self._lock_path = probe._lock_path
        last_error = "did not listen"
        any_port = listen.endswith(":0")
        for _ in range(3 if any_port else 1):
            address = f"{HOST}:{_free_port()}" if any_port else listen
            srv = Server(db_path, address)
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
                if _endpoint_open(address, timeout=0.2):
                    self.address = address
                    self.engine_pid = self.proc.pid
                    return
                time.sleep(0.02)
            last_error = f"exit code {self.proc.poll()}"
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()
            self.proc.wait()
        self._release()
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
        with contextlib.suppress(Exception):
            self._lock.close()
        with contextlib.suppress(OSError):
            os.unlink(self._lock_path)


def _die_with_parent() -> None:
    """In the 2.x engine child: get SIGKILL when the serving process dies (Linux)."""
    import ctypes

    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _unlink_socket(address: str) -> None:
    sock = _socket_file(address)
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


def serve(db_path: str, idle: float, *, detach: bool = False, port: int | None = None) -> int:
    """Run the server for ``db_path`` until idle for ``idle`` seconds or signalled.

    It listens on a private unix socket, or on 127.0.0.1:``port`` (TCP, no
    authentication; 0 picks a free port) when a port is given.
    """
    db_path = str(Path(db_path).expanduser().resolve())
    ready_w = None
    if detach:
        # Fork so the server is re-parented to init (no zombie in the spawner);
        # the launcher exits once the server has recorded itself as starting.
        ready_r, ready_w = os.pipe()
        if os.fork() != 0:
            os.close(ready_w)
            started = os.read(ready_r, 1) == b"1"  # b"" if the server died first
            os._exit(0 if started else 1)
        os.close(ready_r)
    pid = os.getpid()
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *_: stop.set())
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("pymilvus").setLevel(logging.CRITICAL)
    logging.getLogger("grpc._server").addFilter(drop_unimplemented)
    warnings.filterwarnings("ignore", category=UserWarning, module="jieba")
    _write_state(db_path, {"pid": pid, "status": "starting", "db": db_path})
    if ready_w is not None:
        os.write(ready_w, b"1")
        os.close(ready_w)
    activity = _Activity()
    try:
        check_layout(db_path)
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
        _write_state(db_path, {"pid": pid, "status": "error", "error": one_line(exc)})
        logger.error("cannot open %s: %s", db_path, one_line(exc))
        return 1
    import importlib.metadata

    _write_state(
        db_path,
        {
            "pid": pid,
            "status": "ready",
            "db": db_path,
            "address": engine.address,
            "uri": _uri(engine.address),
            "engine": f"milvus-lite {importlib.metadata.version('milvus-lite')}",
            "engine_pid": engine.engine_pid,
            "started": time.time(),
            "idle_timeout": idle,
        },
    )
    if isinstance(engine, _Lite3Engine):  # 2.x tokenises in its C++ engine
        threading.Thread(target=_warm_analyzer, daemon=True).start()
    started = time.monotonic()
    last_client = started
    poll = max(0.05, min(1.0, idle / 4))
    sock = _socket_file(engine.address)
    sock_id = _inode(sock) if sock else None
    try:
        while not stop.wait(poll):
            if engine.dead():
                logger.error("engine for %s exited", db_path)
                break
            if sock and _inode(sock) != sock_id:
                # Removed (a temp cleaner): no new client could reach us, so make way for a new server.
                logger.warning("socket %s of %s was removed; exiting", sock, db_path)
                break
            now = time.monotonic()
            conns = _count_connections(engine.address)
            if conns:
                last_client = now
            if conns is None and not activity.known:
                last_client = max(last_client, started)  # nothing observable: idle since start
            if now - max(last_client, activity.last) < idle:
                continue
            if _idle_exit(db_path, pid, engine, activity, idle):
                break
    finally:
        _remove_state_if(db_path, pid)
        engine.stop()
    return 0


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

    fd = os.open(sidecar_paths(db_path)["lock"], os.O_CREAT | os.O_RDWR, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False  # someone is attaching right now
        if _count_connections(engine.address) or time.monotonic() - activity.last < idle:
            return False
        _remove_state_if(db_path, pid)
        engine.stop()
        return True
    finally:
        os.close(fd)


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m memsearch_fast.lite_server")
    sub = parser.add_subparsers(dest="cmd", required=True)
    p_serve = sub.add_parser("serve", help="serve a Milvus Lite database to other processes")
    p_serve.add_argument("db")
    p_serve.add_argument("--idle-timeout", type=float, default=None)
    p_serve.add_argument("--detach", action="store_true")
    p_serve.add_argument(
        "--port", type=int, default=None, help="serve on 127.0.0.1:PORT (TCP, no authentication) instead of a private socket"
    )
    p_status = sub.add_parser("status", help="show the server owning a database")
    p_status.add_argument("db")
    p_stop = sub.add_parser("stop", help="stop the server owning a database")
    p_stop.add_argument("db")
    args = parser.parse_args(argv)
    if args.cmd == "serve":
        return serve(args.db, args.idle_timeout or idle_timeout(), detach=args.detach, port=args.port)
    if args.cmd == "status":
        st = server_status(args.db)
        print(json.dumps(st) if st else "not running")
        return 0 if st else 1
    return 0 if stop_server(args.db) else 1


if __name__ == "__main__":
    sys.exit(main())
