"""``memsearch watch`` as a client of the database's service: one streaming connection.

Every other request is one line out and one back on the service's thread; a
follower keeps its connection for as long as it watches, so it gets a thread
of its own. It registers the client's roots with a lease in the client's name
(``watch:PID:N``, the pid from the socket's peer credentials, N per connection), streams each
event of those roots as a JSON line, and renews the lease while the
connection lives. When the client goes (Ctrl-C, SIGTERM, kill -9: the
connection closes) its leases are released at once, and a root nobody else
holds is unwatched after its run in hand is written.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import socket
import threading
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from memsearch_fast.serve import protocol
from memsearch_fast.serve.client import pending

logger = logging.getLogger(__name__)

#: How often a follower's lease is renewed (well inside the lease's lifetime).
RENEW_S = 30.0
#: How often a quiet follower looks whether its client is still there.
POLL_S = 0.25


@dataclass(eq=False)
class Follower:
    """A ``memsearch watch`` client streaming the events of its roots
    (:mod:`memsearch_fast.serve.follow`): it holds a lease on each root while its
    connection lives, and its events arrive on :attr:`events` from the loop's thread."""

    request: protocol.WatchFollow
    holder: str
    pid: int | None
    collection: str
    roots: frozenset[str]
    keys: frozenset[tuple[Any, ...]]
    events: queue.Queue[dict[str, Any]] = field(default_factory=queue.Queue)


class Registry(Protocol):
    """What a follower needs of :class:`memsearch_fast.serve.watchers.Registry`."""

    lease_s: float

    def follow(self, req: protocol.WatchFollow, pid: int | None) -> tuple[Mapping[str, Any], Follower | None]: ...
    def renew(self, follower: Follower, roots: Collection[str]) -> None: ...
    def unfollow(self, follower: Follower) -> None: ...


def start(conn: socket.socket, registry: Registry, request: protocol.WatchFollow, pid: int | None) -> None:
    """Serve *conn* on a thread of its own; the thread closes it."""
    threading.Thread(target=_serve, args=(conn, registry, request, pid), name="watch-follow", daemon=True).start()


def _send(conn: socket.socket, data: Mapping[str, Any]) -> None:
    conn.sendall(protocol.reply(data))


def _gone(conn: socket.socket) -> bool:
    """Whether the client closed its end (it sends nothing after its request)."""
    return pending(conn) == b""


def _serve(conn: socket.socket, registry: Registry, request: protocol.WatchFollow, pid: int | None) -> None:
    follower: Follower | None = None
    try:
        conn.settimeout(10)
        reply, follower = registry.follow(request, pid)
        _send(conn, reply)
        if follower is not None:
            _stream(conn, registry, follower)
    except Exception as exc:  # noqa: BLE001 - the client sees its connection end, and connects again
        logger.info("watch follower %s ended: %s", pid, exc)
    finally:
        if follower is not None:
            with contextlib.suppress(Exception):
                registry.unfollow(follower)
        with contextlib.suppress(OSError):
            conn.close()


def _stream(conn: socket.socket, registry: Registry, follower: Follower) -> None:
    """Events until every root of *follower* has stopped or the client is gone."""
    left = set(follower.roots)
    every = min(RENEW_S, registry.lease_s / 3)  # well before the lease would lapse
    renew_at = time.monotonic() + every
    while left:
        if _gone(conn):
            return
        if time.monotonic() >= renew_at:
            registry.renew(follower, left)
            renew_at = time.monotonic() + every
        try:
            data = follower.events.get(timeout=POLL_S)
        except queue.Empty:
            continue
        _send(conn, data)
        if data["event"] == "stopped":
            if data.get("service"):
                return  # the service is going: the client connects to the next one
            left.discard(data["root"])
