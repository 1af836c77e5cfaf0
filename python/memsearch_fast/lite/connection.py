"""Opening a local Milvus Lite database with one call, whichever mode serves it.

:func:`connect` checks the database's layout against the installed
milvus-lite, then attaches to the database's shared server (:mod:`.broker`,
the default) or, with ``MEMSEARCH_LITE_MODE=embedded``, opens it inside this
process (:mod:`.embedded`). The caller supplies the client factory, so this
package never imports pymilvus itself.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from memsearch_fast.lite import broker, damage, embedded
from memsearch_fast.lite.settings import lite_mode
from memsearch_fast.lite.sidecars import check_layout


class LiteConnection:
    """A client of one local database, and how that database is served.

    ``shared`` is True when the per-database server serves it: that server may
    exit (idle timeout, crash, kill) and a fresh :func:`connect` re-attaches to
    a new one. :meth:`close` closes the client and, in embedded mode, stops
    the in-process engine once its last user in this process has closed.
    """

    def __init__(self, client: Any, db_path: str, *, shared: bool) -> None:
        self._client = client
        self.db_path = db_path
        self.shared = shared

    @property
    def client(self) -> Any:
        """The client made by the factory given to :func:`connect` (None once closed)."""
        return self._client

    def close(self) -> None:
        """Close the client; releasing an embedded engine happens once per connection."""
        client, self._client = self._client, None
        if client is None:
            return
        with contextlib.suppress(Exception):  # closing a dead connection is not an error
            client.close()
        if not self.shared:
            embedded.release(self.db_path)


def connect(db_path: str, make_client: Callable[[str], Any], tables: tuple[str, ...] = ()) -> LiteConnection:
    """Connect to the Milvus Lite database at ``db_path``.

    ``make_client(uri)`` builds the client: ``uri`` is the shared server's
    address, or the database path itself in embedded mode (where the client
    opens the engine in this process). Failures are raised as
    :class:`~memsearch_fast.errors.StoreError` (a database of the other
    milvus-lite generation, or no database at all),
    :class:`~memsearch_fast.errors.DatabaseDamagedError` (found damaged, see
    :mod:`.damage`) or :class:`~memsearch_fast.errors.StoreUnavailableError`
    (held by another process, a server that cannot start), each one line.
    A server started here makes the ``tables`` a client is about to use
    (:mod:`.pk_index`).
    """
    db_path = str(Path(db_path).expanduser().resolve())
    check_layout(db_path)
    damage.check(db_path)  # found damaged before: the same error, no server started
    if lite_mode() == "embedded":
        return LiteConnection(embedded.open_client(db_path, make_client), db_path, shared=False)
    return LiteConnection(broker.attach(db_path, make_client, tables=tables), db_path, shared=True)
