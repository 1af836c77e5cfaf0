"""One process owns a Milvus Lite database and serves every other process.

Milvus Lite lets one process at a time open a database, but agents run
``memsearch search`` while ``watch`` or ``index`` runs on the same one. The
store gets a client for a local database from :func:`connect`, which hides
which mode serves it. By default it goes through a small broker
(:mod:`.broker`):

1. take an exclusive ``flock`` on ``<db>.lock`` (held only while attaching);
2. read ``<db>.server.json``; if the recorded server checks out (pid alive,
   its command line serves exactly this path, the socket named after the path
   and pid is served by that pid as this user: ``process.verify_server``)
   connect to it; the record itself is never trusted;
3. otherwise clean up the stale record and spawn a detached
   ``python -m memsearch_fast.serve.lite_main serve <db>`` that opens the database,
   listens on a unix socket in a directory only this user may enter, and
   records pid + socket, then connect.

The server exits after ``MEMSEARCH_LITE_IDLE_TIMEOUT`` seconds (default 600)
with no client connected and no request. It keeps collections loaded, so a
new CLI process searches a warm index instead of reloading it. A killed
server leaves its record behind; the next attach sees the dead pid and starts
a new server, which recovers the database from its write-ahead log.

``MEMSEARCH_LITE_MODE=embedded`` opens the database inside the calling
process instead (one process at a time, as plain pymilvus does; :mod:`.embedded`
counts the stores using it and stops the engine when the last one closes).

Modules: :mod:`.connection` (:func:`connect`, :class:`LiteConnection`),
:mod:`.broker` (attach, spawn, stop: the client side), :mod:`.server` (the
server process), :mod:`.engine` (the engine it serves), :mod:`.settings` (``MEMSEARCH_LITE_*``), :mod:`.sockets` (socket
directories and names), :mod:`.state` (the server record), :mod:`.sidecars`
(files beside a database, layout checks, the broker lock), :mod:`.process` (is a recorded server alive, ours,
answering), :mod:`.damage` (a database whose collection could not be
loaded is reported, never served in part), :mod:`.embedded`,
:mod:`.version`. Nothing here imports
:mod:`memsearch_fast.store` or pymilvus at import time.
"""

from memsearch_fast.lite.connection import LiteConnection, connect

__all__ = ["LiteConnection", "connect"]
