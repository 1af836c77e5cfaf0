"""The client side of the database's service socket (searches, watched roots, status).

One JSON line out, one back, on the private socket the database's Lite server
records as ``search`` in its record. Both ends check with ``SO_PEERCRED``
that the other runs as this user (and that the server is the recorded pid);
every request is built and every reply read by :mod:`.protocol` (the request
stamped with the protocol version and this installation, so a server started
before an upgrade answers nothing).

The watched-root requests (:func:`lease`, :func:`release`, :func:`status`)
qualify only where the service could index exactly as this process would: a
local database served by its Lite server and the local ONNX model (no API key
ever crosses the socket). Otherwise they return None and the caller keeps a
process of its own (``memsearch watch``).
"""

from __future__ import annotations

import contextlib
import os
import select
import socket
import struct
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memsearch_fast.lite.sockets import search_socket
from memsearch_fast.serve import protocol
from memsearch_fast.serve.protocol import LINE_LIMIT

if TYPE_CHECKING:
    from memsearch_fast.config.settings import Settings


def peer(sock: socket.socket) -> tuple[int, int] | None:
    """(pid, uid) of the process at the other end, where the OS says."""
    option = getattr(socket, "SO_PEERCRED", None)
    if option is None:
        return None
    pid, uid, _gid = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, option, struct.calcsize("3i")))
    return pid, uid


def read_line(sock: socket.socket, deadline: float | None = None) -> bytes:
    """One line from *sock*; by the monotonic *deadline* when given (``TimeoutError``
    after it, however the peer paces its bytes)."""
    buf = bytearray()
    while not buf.endswith(b"\n"):
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("the request was not sent in time")
            sock.settimeout(left)
        part = sock.recv(65536)
        if not part:
            break
        buf += part
        if len(buf) > LINE_LIMIT * 64:
            raise OSError("reply too long")
    return bytes(buf)


def pending(sock: socket.socket) -> bytes | None:
    """What the peer sent, without waiting: None when nothing is there yet, b""
    when it closed its end (or the connection failed)."""
    readable, _, _ = select.select([sock], [], [], 0)
    if not readable:
        return None
    try:
        return sock.recv(4096)
    except OSError:
        return b""


def server_record(db_path: str) -> dict[str, Any] | None:
    """The record of the database's live, ready server with a service socket, or None."""
    from memsearch_fast._os import pid_alive
    from memsearch_fast.lite.state import read_state

    st = read_state(db_path)
    pid = st.get("pid") if st else None
    if not st or st.get("status") != "ready" or not st.get("search") or not isinstance(pid, int) or not pid_alive(pid):
        return None
    return st


def _connect(db_path: str, timeout: float) -> socket.socket | None:
    """A connection to the database's verified service (this user's, the recorded pid), or None."""
    from memsearch_fast.lite.sockets import server_socket

    st = server_record(db_path)
    if st is None:
        return None
    pid = st["pid"]
    path = search_socket(server_socket(db_path, pid, st.get("address")))
    if st["search"] != "unix:" + path:
        return None
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.settimeout(timeout)
        s.connect(path)
        who = peer(s)
        if who is not None and (who[1] != os.geteuid() or who[0] != pid):
            s.close()
            return None
    except BaseException:
        s.close()
        raise
    return s


def call(db_path: str, request: protocol.Request, timeout: float = 60.0) -> dict[str, Any] | None:
    """The service's reply to *request*, or None when no verified service answers."""
    try:
        s = _connect(db_path, timeout)
        if s is None:
            return None
        with s:
            s.sendall(protocol.encode(request))
            return protocol.answer(read_line(s))
    except Exception:  # noqa: BLE001 - no answer, whatever the reason
        return None


class Stream:
    """The lines a followed request (``watch.follow``) gets back, read as they come."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._buf = bytearray()

    def read(self, timeout: float) -> dict[str, Any] | None:
        """The next line, or None when none came within *timeout*; EOFError when the service closed."""
        while b"\n" not in self._buf:
            self._sock.settimeout(timeout)
            try:
                part = self._sock.recv(65536)
            except TimeoutError:
                return None
            if not part:
                raise EOFError("the service closed the connection")
            self._buf += part
            if len(self._buf) > LINE_LIMIT:
                raise EOFError("a line from the service is too long")
        line, _, rest = bytes(self._buf).partition(b"\n")
        self._buf = bytearray(rest)
        data = protocol.answer(line)
        if data is None:
            raise EOFError("the service sent something other than an event")
        return data

    def send(self, line: bytes) -> None:
        """A line to the service (``cancel``); a service already gone is not an error here."""
        with contextlib.suppress(OSError):
            self._sock.sendall(line)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._sock.close()

    def __enter__(self) -> Stream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_stream(db_path: str, request: protocol.WatchFollow | protocol.IndexRun) -> Stream | None:
    """Send *request* and keep the connection for what comes back, or None when no verified service answers."""
    try:
        s = _connect(db_path, 10.0)
        if s is None:
            return None
        try:
            s.sendall(protocol.encode(request))
        except BaseException:
            s.close()
            raise
    except OSError:
        return None
    return Stream(s)


def served_database(cfg: Settings) -> str | None:
    """The local database whose service may take this configuration's work, or None."""
    from memsearch_fast.lite.fallback import effective_uri
    from memsearch_fast.lite.settings import lite_mode
    from memsearch_fast.store.compat import is_local_uri

    uri = effective_uri(str(cfg.milvus.uri))  # the switch away from a 3.x database, as every command makes it
    if cfg.milvus.token or not is_local_uri(uri) or lite_mode() != "server" or cfg.embedding.provider != "onnx":
        return None
    return str(Path(uri).expanduser().resolve())


def model_of(cfg: Settings) -> tuple[str, str] | None:
    """(directory, recorded name) of the configured ONNX model on this machine, or None."""
    model = cfg.embedding.model or None
    try:
        from memsearch_fast.config.schema import DEFAULT_MODELS
        from memsearch_fast.embeddings.models import canonical_name, resolve_model

        model_dir = str(resolve_model(model, offline=True).expanduser().resolve())
    except Exception:  # noqa: BLE001 - a missing model: this process reports it
        return None
    if model is None:
        return model_dir, DEFAULT_MODELS["onnx"]
    path = Path(os.fspath(model)).expanduser()
    # The name the collection records: a directory by its absolute path (store.schema.embedding_model).
    return model_dir, os.path.abspath(path) if path.exists() else canonical_name(os.fspath(model))


def run_settings(
    cfg: Settings,
    *,
    ignore_files: Sequence[str] = (),
    exclude: Sequence[str] = (),
    collection: str | None = None,
) -> tuple[str, protocol.RunSettings] | None:
    """The database and the settings the service indexes with as this process
    would (collection, model, chunking, file filters), or None where it cannot."""
    db_path = served_database(cfg)
    model = model_of(cfg) if db_path else None
    if db_path is None or model is None:
        return None
    return db_path, {
        "collection": collection or cfg.milvus.collection,
        "model_dir": model[0],
        "model_name": model[1],
        "max_chunk_size": cfg.chunking.max_chunk_size,
        "overlap_lines": cfg.chunking.overlap_lines,
        "ignore_files": list(dict.fromkeys([*cfg.indexing.ignore_files, *ignore_files])),
        "exclude": list(dict.fromkeys([*cfg.indexing.exclude, *exclude])),
    }


def lease_request(
    cfg: Settings,
    roots: Sequence[str],
    *,
    holder: str,
    pid: int | None,
    ignore_files: Sequence[str] = (),
    exclude: Sequence[str] = (),
    collection: str | None = None,
) -> tuple[str, protocol.WatchLease] | None:
    """The database and the request that registers (or renews) *roots* for *holder*
    (in *collection*, else the configured one), or None."""
    prepared = run_settings(cfg, ignore_files=ignore_files, exclude=exclude, collection=collection)
    if prepared is None:
        return None
    db_path, settings = prepared
    return db_path, {
        "op": "watch.lease",
        **settings,
        "roots": [str(Path(r).expanduser().resolve()) for r in roots],
        "debounce_ms": cfg.watch.debounce_ms,
        "holder": holder,
        "pid": pid,
        "ttl": None,  # the service's own
    }


def ensure_server(db_path: str) -> None:
    """Start the database's server unless one runs (the broker's own rules and checks)."""
    from memsearch_fast.lite import broker

    broker.attach(db_path, lambda uri: uri)


def send_lease(db_path: str, request: protocol.WatchLease, *, start: bool) -> dict[str, Any] | None:
    """Register or renew; with *start*, a server is started first when none answers."""
    reply = call(db_path, request, timeout=10.0)
    if reply is None and start:
        ensure_server(db_path)
        reply = call(db_path, request, timeout=10.0)
    return reply


def release(db_path: str, holder: str, roots: Sequence[str] | None = None, collection: str | None = None) -> bool:
    """Drop *holder*'s leases (of *roots* in *collection*, or all of them); whether a service answered."""
    request: protocol.WatchRelease = {"op": "watch.release", "holder": holder}
    if roots is not None:
        request["roots"] = [str(Path(r).expanduser().resolve()) for r in roots]
    if collection is not None:
        request["collection"] = collection
    reply = call(db_path, request, timeout=10.0)
    return bool(reply and reply.get("ok"))


def status(db_path: str) -> dict[str, Any] | None:
    """What the service says of itself: models, roots, leases, queue; None when none runs."""
    reply = call(db_path, {"op": "status"}, timeout=10.0)
    return reply if reply and "roots" in reply else None


def main(argv: Sequence[str]) -> int:
    """``python -m memsearch_fast.serve.client lease DB`` with the request on stdin: a
    detached helper that starts the server and registers, so a hook never waits for it."""
    import sys

    if len(argv) not in (2, 3) or argv[0] != "lease":  # the third, the root, is for `ps`
        print("usage: python -m memsearch_fast.serve.client lease DB [ROOT] < request.json", file=sys.stderr)
        return 2
    request = protocol.read(sys.stdin.buffer.read(LINE_LIMIT + 1), None)
    if isinstance(request, protocol.Refusal) or request["op"] != "watch.lease":
        why = request.reason if isinstance(request, protocol.Refusal) else f"{request['op']} is no lease"
        print(f"cannot register with the service of {argv[1]}: {why}", file=sys.stderr)
        return 2
    try:
        reply = send_lease(argv[1], request, start=True)
    except Exception as exc:  # noqa: BLE001 - one line in the project's watch.log
        from memsearch_fast.errors import one_line

        print(f"cannot start the service of {argv[1]}: {one_line(exc)}", file=sys.stderr)
        return 1
    if not reply or not reply.get("ok"):
        print(f"cannot register {request.get('roots')} with the service of {argv[1]}: {reply}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv[1:]))
