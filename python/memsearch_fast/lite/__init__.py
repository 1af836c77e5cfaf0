"""One process owns a Milvus Lite database and serves every other process.

Milvus Lite lets one process at a time open a database, but agents run
``memsearch search`` while ``watch`` or ``index`` runs on the same one. For a
local database the store therefore connects through a small broker:

1. take an exclusive ``flock`` on ``<db>.lock`` (held only while attaching);
2. read ``<db>.server.json``; if the recorded server is alive (pid, command
   line, socket answering) connect to it;
3. otherwise clean up the stale record and spawn a detached
   ``python -m memsearch_fast.lite.server serve <db>`` that opens the database,
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
