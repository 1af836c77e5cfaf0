"""``python -m memsearch_fast.serve.lite_main``: a local database's one server
process, the Milvus Lite engine (:mod:`memsearch_fast.lite.server`) with the
service beside it (:mod:`.search`: searches, and the watched roots of
:mod:`.watchers`, with one loaded model shared by both; :mod:`.keeper`
releases the engine's idle collections).

The broker starts it (``serve --detach``); ``status`` and ``stop`` are for a
person. The engine side knows nothing of the services it is handed, so
``lite/`` never imports upward.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable
from typing import Any

from memsearch_fast.errors import one_line
from memsearch_fast.lite.broker import server_status, stop_server
from memsearch_fast.lite.process import add_serve_arguments
from memsearch_fast.lite.server import serve
from memsearch_fast.lite.settings import SERVER_MARK, idle_timeout
from memsearch_fast.lite.sockets import search_socket

logger = logging.getLogger("memsearch_fast.lite.server")


def search_service(db_path: str, sock: str | None, uri: str, touch: Callable[[], None]) -> Any:
    """The service beside a unix-socket engine: searches and the watched roots,
    sharing one loaded model; or None (a TCP server serves clients of any
    user: no work on their behalf)."""
    if sock is None:
        return None
    from memsearch_fast.config import environment
    from memsearch_fast.serve import search
    from memsearch_fast.serve.models import Models
    from memsearch_fast.serve.watchers import Registry

    _more_open_files()
    models = Models(environment.number(search.ENV_UNLOAD, search.DEFAULT_UNLOAD_S))
    try:
        service = search.Service(search_socket(sock), uri, touch, db_path, models=models)
    except OSError as exc:
        logger.warning("no search service for %s: %s", db_path, one_line(exc))
        return None
    from memsearch_fast.serve.keeper import Keeper

    service.keeper = Keeper.from_env(uri, db_path, service.busy).start()
    service.watchers = Registry(db_path, models, touch, used=service.keeper.touch).start()
    return service.start()


def _more_open_files() -> None:
    """The soft limit on open files raised to the hard one: the service holds a
    watcher lock per watched root, and many systems start at 1,024 files."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        want = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 16)
        if soft != resource.RLIM_INFINITY and soft < want:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    except (ImportError, OSError, ValueError) as exc:
        logger.info("open-file limit left as it is: %s", exc)


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog=f"python -m {SERVER_MARK}")
    sub = parser.add_subparsers(dest="cmd", required=True)
    p_serve = sub.add_parser("serve", help="serve a Milvus Lite database to other processes")
    add_serve_arguments(p_serve)
    p_status = sub.add_parser("status", help="show the server owning a database")
    p_status.add_argument("db")
    p_stop = sub.add_parser("stop", help="stop the server owning a database")
    p_stop.add_argument("db")
    args = parser.parse_args(argv)
    if args.cmd == "serve":
        timeout = args.idle_timeout or idle_timeout()
        return serve(
            args.db, timeout, detach=args.detach, port=args.port, services=search_service, tables=tuple(args.table)
        )
    if args.cmd == "status":
        st = server_status(args.db)
        print(json.dumps(st) if st else "not running")
        return 0 if st else 1
    return 0 if stop_server(args.db) else 1


if __name__ == "__main__":
    sys.exit(main())
