"""Who is connected to a unix socket, from Linux's socket diagnostics (``ss -xp``).

``/proc/net/unix`` lists the connections a listening socket accepted but not
who holds their other ends, so a server that is itself a client of its engine
(the resident service's searches, watchers and keeper) counted its own
connections as clients and never went idle. The kernel's ``sock_diag``
netlink interface gives each accepted socket's peer; the peers that are this
process's own sockets are not clients.
"""

from __future__ import annotations

import contextlib
import os
import socket
import struct

NETLINK_SOCK_DIAG = 4
SOCK_DIAG_BY_FAMILY = 20
NLM_F_REQUEST = 0x1
NLM_F_DUMP = 0x300
NLMSG_ERROR = 2
NLMSG_DONE = 3
UDIAG_SHOW_NAME = 0x1
UDIAG_SHOW_PEER = 0x4
UNIX_DIAG_NAME = 0
UNIX_DIAG_PEER = 2
ESTABLISHED = 1
_HEADER = struct.Struct("=IHHII")  # nlmsghdr
_REQUEST = struct.Struct("=BBHIIIII")  # unix_diag_req
_MESSAGE = struct.Struct("=BBBBIII")  # unix_diag_msg


def _align(n: int) -> int:
    return (n + 3) & ~3


def accepted_peers(path: str) -> list[int] | None:
    """The peer inode of every connection accepted on the unix socket bound at *path*,
    or None where the kernel does not say (not Linux, no sock_diag)."""
    want = os.fsencode(path)
    request = _REQUEST.pack(socket.AF_UNIX, 0, 0, 1 << ESTABLISHED, 0, UDIAG_SHOW_NAME | UDIAG_SHOW_PEER, 0, 0)
    header = _HEADER.pack(_HEADER.size + len(request), SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST | NLM_F_DUMP, 1, 0)
    try:
        sock = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, NETLINK_SOCK_DIAG)
    except (AttributeError, OSError):
        return None
    peers: list[int] = []
    with contextlib.closing(sock):
        try:
            sock.settimeout(2.0)
            sock.sendall(header + request)
            while True:
                data = sock.recv(1 << 16)
                if not data:
                    return None
                at = 0
                while at + _HEADER.size <= len(data):
                    length, kind, _flags, _seq, _pid = _HEADER.unpack_from(data, at)
                    if kind == NLMSG_DONE:
                        return peers
                    if kind == NLMSG_ERROR or length < _HEADER.size:
                        return None
                    name, peer = _attributes(data[at + _HEADER.size + _MESSAGE.size : at + length])
                    if name == want and peer:
                        peers.append(peer)
                    at += _align(length)
        except OSError:
            return None


def _attributes(body: bytes) -> tuple[bytes | None, int]:
    """The bound name and the peer inode in one message's attributes."""
    name, peer, at = None, 0, 0
    while at + 4 <= len(body):
        length, kind = struct.unpack_from("=HH", body, at)
        if length < 4:
            break
        value = body[at + 4 : at + length]
        if kind == UNIX_DIAG_NAME:
            name = value.rstrip(b"\0")
        elif kind == UNIX_DIAG_PEER and len(value) >= 4:
            peer = struct.unpack_from("=I", value)[0]
        at += _align(length)
    return name, peer


def own_sockets() -> set[int]:
    """The inodes of this process's sockets."""
    out: set[int] = set()
    try:
        fds = os.listdir("/proc/self/fd")
    except OSError:
        return out
    for fd in fds:
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/self/fd/{fd}")
            if target.startswith("socket:["):
                out.add(int(target[8:-1]))
    return out


def clients(path: str) -> int | None:
    """Connections to the unix socket at *path* held by other processes than this one
    (None: unknown)."""
    peers = accepted_peers(path)
    if peers is None:
        return None
    mine = own_sockets()
    return sum(1 for peer in peers if peer not in mine)
