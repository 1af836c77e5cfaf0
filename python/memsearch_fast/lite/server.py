"""Server side: one process owns a Lite database and serves it on a private socket.

The lifecycle lives here (the record, the poll loop, the idle exit under the
broker lock); the engine it serves, 2.x or 3.x, in :mod:`.engine`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from memsearch_fast._os import locked
from memsearch_fast.errors import DatabaseDamagedError, StoreError, one_line
from memsearch_fast.lite import damage
from memsearch_fast.lite.embedded import drop_unimplemented
from memsearch_fast.lite.engine import Activity, Engine, Lite2Engine, Lite3Engine, unlink_socket
from memsearch_fast.lite.settings import HOST
from memsearch_fast.lite.sidecars import check_layout, open_lock, sidecar_paths
from memsearch_fast.lite.sockets import address_uri, socket_file, socket_path
from memsearch_fast.lite.state import database_id, remove_state_if, write_state
from memsearch_fast.lite.version import milvus_lite_major

logger = logging.getLogger(__name__)


def count_connections(address: str) -> int | None:
    """Clients connected to ``address`` (Linux), or None when unknown: other processes
    only, where the kernel says who holds each connection's other end (this process's
    own services are clients of its engine too, and would keep it from ever going idle)."""
    path = socket_file(address)
    if path is not None:
        from memsearch_fast.lite.peers import clients

        others = clients(path)
        if others is not None:
            return others
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
    tables: tuple[str, ...] = (),
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
    ready_w = _detach() if detach else None
    pid = os.getpid()
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *_: stop.set())
    _quiet_logging()
    try:
        write_state(db_path, {"pid": pid, "status": "starting", "db": db_path})
    except (OSError, StoreError) as exc:
        logger.error("cannot serve %s: %s", db_path, one_line(exc))
        return 1
    if ready_w is not None:
        os.write(ready_w, b"1")
        os.close(ready_w)
    activity = Activity()
    log_offset = damage.log_size(db_path)  # where this server's (and its engine's) output starts
    engine = _start_engine(db_path, pid, port, activity, log_offset, tables)
    if engine is None:
        return 1
    service = (
        services(db_path, socket_file(engine.address), address_uri(engine.address), activity.touch)
        if services
        else None
    )
    db_id = database_id(db_path)  # the engine has opened (or created) it
    _record_ready(db_path, pid, engine, db_id, idle, log_offset, service)
    if isinstance(engine, Lite3Engine):  # 2.x tokenises in its C++ engine
        threading.Thread(target=_warm_analyzer, daemon=True).start()
    damaged = ""
    held = [engine]  # the engine now serving: a killed one is started again
    try:
        damaged = _run(db_path, pid, held, activity, idle, stop, db_id, log_offset, service)
    finally:
        remove_state_if(db_path, pid)
        if service is not None:
            service.stop()
        held[0].stop()
        if damaged:
            damage.mark(db_path, damaged)  # once the engine has let go of the file
    return 0


def _detach() -> int:
    """Fork so the server is re-parented to init (no zombie in the spawner);
    the launcher exits once the server has recorded itself as starting.
    Returns, in the server, the pipe end to write ``b"1"`` to then."""
    ready_r, ready_w = os.pipe()
    if os.fork() != 0:
        os.close(ready_w)
        launched = os.read(ready_r, 1) == b"1"  # b"" if the server died first
        os._exit(0 if launched else 1)
    os.close(ready_r)
    return ready_w


def _quiet_logging() -> None:
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("pymilvus").setLevel(logging.CRITICAL)
    logging.getLogger("grpc._server").addFilter(drop_unimplemented)
    warnings.filterwarnings("ignore", category=UserWarning, module="jieba")


def _start_engine(
    db_path: str, pid: int, port: int | None, activity: Activity, log_offset: int, tables: tuple[str, ...] = ()
) -> Engine | None:
    """Open the database in the engine of the installed milvus-lite; None once
    a failure is recorded (and, when the database is damaged, marked)."""
    try:
        check_layout(db_path)
        damage.check(db_path)
        major = milvus_lite_major()
        if port is None:
            listen = "unix:" + socket_path(db_path, pid)
            unlink_socket(listen)  # only a dead server with our pid can have left it
        else:
            listen = f"{HOST}:{port}"
        return Lite3Engine(db_path, activity, listen) if (major or 0) >= 3 else Lite2Engine(db_path, listen, tables)
    except Exception as exc:  # noqa: BLE001 - reported through the record
        error = one_line(exc)
        found_damaged = isinstance(exc, DatabaseDamagedError)
        if damage.is_damage(error) and not found_damaged:
            cause = damage.log_cause(db_path, log_offset) or error
            damage.mark(db_path, cause)
            error, found_damaged = damage.message(db_path, cause), True
        write_state(db_path, {"pid": pid, "status": "error", "error": error, "damaged": found_damaged})
        logger.error("cannot open %s: %s", db_path, error)
        return None


def _record_ready(
    db_path: str, pid: int, engine: Engine, db_id: list[int] | None, idle: float, log_offset: int, service: Any
) -> None:
    import importlib.metadata

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


def _run(
    db_path: str,
    pid: int,
    held: list[Engine],
    activity: Activity,
    idle: float,
    stop: threading.Event,
    db_id: list[int] | None,
    log_offset: int,
    service: Any = None,
) -> str:
    """Serve until signalled, idle, or one of the reasons of :func:`_must_exit`;
    returns the engine's statement of damage, or ""."""
    engine = held[0]
    started = time.monotonic()
    last_client = started
    poll = max(0.05, min(1.0, idle / 4))
    sock = socket_file(engine.address)
    sock_id = _inode(sock) if sock else None
    watch_log = _LogWatch(db_path, log_offset)
    revived: list[float] = []
    while not stop.wait(poll):
        if engine.dead():
            # Killed from outside (memsearch 0.4's hooks kill every Milvus Lite engine
            # of the user): start it again where clients find it, a few times a minute at most.
            damaged = watch_log.damage()
            if damaged:
                logger.error("%s", damage.message(db_path, damaged))
                return damaged
            revived = [t for t in revived if time.monotonic() - t < REVIVE_WINDOW_S]
            again = _revive(db_path, engine) if len(revived) < REVIVE_MAX else None
            if again is None:
                logger.error("engine for %s exited", db_path)
                return ""
            revived.append(time.monotonic())
            held[0] = engine = again
            sock_id = _inode(sock) if sock else None
            _record_ready(db_path, pid, engine, db_id, idle, log_offset, service)
            continue
        damaged = watch_log.damage()
        if damaged:
            # A collection the engine could load only in part: serve nothing more.
            logger.error("%s", damage.message(db_path, damaged))
            return damaged
        if _gone(db_path, sock, sock_id, db_id):
            return ""
        now = time.monotonic()
        conns = count_connections(engine.address)
        if conns:
            last_client = now
        if conns is None and not activity.known:
            last_client = max(last_client, started)  # nothing observable: idle since start
        if now - max(last_client, activity.last) < idle:
            continue
        if _idle_exit(db_path, pid, engine, activity, idle):
            return ""
    return ""


#: Engines started again after a kill, at most, within this many seconds: past
#: that something kills them as they start, and the server makes way instead.
REVIVE_MAX = 5
REVIVE_WINDOW_S = 60.0


def _revive(db_path: str, dead: Engine) -> Engine | None:
    """A new engine of the 2.x kind on the address the dead one listened on (the
    record, the clients and the service's socket stay); None when it cannot start."""
    if not isinstance(dead, Lite2Engine):
        return None  # a 3.x engine runs in this process: it does not die alone
    logger.warning("engine for %s was killed; starting it again", db_path)
    dead.stop()  # its lock and socket
    try:
        return Lite2Engine(db_path, dead.address, dead.tables)
    except Exception as exc:  # noqa: BLE001 - reported, and the server makes way
        logger.error("cannot start the engine for %s again: %s", db_path, one_line(exc))
        return None


def _gone(db_path: str, sock: str | None, sock_id: tuple[int, int] | None, db_id: list[int] | None) -> bool:
    """Whether the socket or the database this server serves left its path."""
    if sock and _inode(sock) != sock_id:
        # Removed (a temp cleaner): no new client could reach us, so make way for a new server.
        logger.warning("socket %s of %s was removed; exiting", sock, db_path)
        return True
    if db_id is not None and database_id(db_path) != db_id:
        # Removed or replaced (rm to rebuild the index): what we hold is gone for
        # everyone else, and writes here would be lost. Clients re-attach to a new server.
        logger.warning("database %s was removed or replaced; exiting", db_path)
        return True
    return False


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


def _idle_exit(db_path: str, pid: int, engine: Engine, activity: Activity, idle: float) -> bool:
    """Withdraw the record and stop the engine under the broker lock, unless a
    client arrived meanwhile: a client that takes the lock next must find the
    database released, or the server it starts could not open it."""
    with contextlib.ExitStack() as held:
        try:
            held.enter_context(locked(sidecar_paths(db_path)["lock"], timeout=0, opener=open_lock))
        except TimeoutError:
            return False  # someone is attaching right now
        except (OSError, StoreError) as exc:
            logger.warning("cannot take the broker lock of %s: %s", db_path, one_line(exc))
            return False
        if count_connections(engine.address) or time.monotonic() - activity.last < idle:
            return False
        remove_state_if(db_path, pid)
        engine.stop()
        return True
