"""`watch` and `index` as clients of the database's service, and the watch events both paths print.

On a local database with the local ONNX model, `memsearch watch` registers
its roots with the database's service and prints the service's runs as its
own events (:mod:`memsearch_fast.serve.follow`), and `memsearch index` hands
its run to a service that already holds the model
(:mod:`memsearch_fast.serve.runs`), so no second model is loaded for one
database. Everything else runs in process, as before.
"""

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from memsearch_fast.cli.app import err, fail
from memsearch_fast.cli.options import FileOptions
from memsearch_fast.config import environment
from memsearch_fast.recall.search import plural as _plural

if TYPE_CHECKING:
    from memsearch_fast.serve import protocol

#: Set to 0 (or off/false/no) and `memsearch watch` runs its own watcher and model
#: even where the database's service could watch for it.
ENV_SERVICE = "MEMSEARCH_WATCH_SERVICE"
#: Set to 0 (or off/false/no) and `memsearch index` always loads its own model.
ENV_INDEX_SERVICE = "MEMSEARCH_INDEX_SERVICE"
#: Times in a row `memsearch watch` tries to reach a service that went away.
RECONNECTS = 5


def index_request(
    cfg: Any, paths: list[str], files: FileOptions, description: str | None, *, force: bool
) -> "tuple[str, protocol.IndexRun] | None":
    """The database and ``index.run`` request when a running service already holds
    the model this run would load (a local database, the local ONNX model), else None."""
    from memsearch_fast.serve import client

    if not environment.flag(ENV_INDEX_SERVICE):
        return None
    prepared = client.run_settings(cfg, ignore_files=files.ignore_file, exclude=files.exclude)
    if prepared is None or client.server_record(prepared[0]) is None:
        return None
    db_path, settings = prepared
    st = client.status(db_path)
    loaded = {os.path.realpath(str(m.get("dir"))) for m in (st or {}).get("models") or []}
    if os.path.realpath(settings["model_dir"]) not in loaded:
        return None  # loading it there would cost what loading it here does
    roots = [str(Path(p).expanduser().resolve()) for p in paths]
    request: protocol.IndexRun = {
        **settings,
        "op": "index.run",
        "paths": roots,
        "description": description or "",
        "force": force,
    }
    return db_path, request


def index_run(db_path: str, request: "protocol.IndexRun", progress: Any) -> Any:
    """The report of the run the service made (drawing its progress here), or None
    when no service of this installation took it (the caller runs it itself).
    Ctrl-C and SIGTERM (as SIGINT) cancel it there: what was embedded is
    written and flushed, then KeyboardInterrupt (exit 130)."""
    from memsearch_fast.index.report import IndexReport
    from memsearch_fast.serve import client

    stream = client.open_stream(db_path, request)
    if stream is None:
        return None
    interrupted = False
    with stream:
        while True:
            try:
                data = stream.read(0.5)
            except KeyboardInterrupt:
                if interrupted:
                    raise
                interrupted = True
                stream.send(b"cancel\n")
                continue
            except (EOFError, OSError, ValueError):
                if interrupted:
                    raise KeyboardInterrupt from None
                return None  # the service went away: this process runs it (what was written stays)
            if data is None:
                continue
            kind = data.pop("event", None)
            if kind in ("progress", "waiting"):
                _show(kind, data, progress)
            elif kind == "report":
                return IndexReport.from_dict(data)
            elif kind == "cancelled" and data.get("service") == "stopping" and not interrupted:
                return None  # the service is stopping (SIGTERM): this process carries on, as after kill -9
            elif kind == "cancelled":
                raise KeyboardInterrupt
            elif kind == "failed":
                fail(str(data.get("error")))
            elif kind is None and data.get("unsupported"):
                return None  # a service of another installation


def _show(kind: str, data: dict[str, Any], progress: Any) -> None:
    """A run's progress drawn here, or its wait for another writer said."""
    if kind == "waiting":
        err(str(data.get("message")))
    elif data.get("call") in ("start", "files_done", "chunks_embedded", "work", "spans_done"):
        getattr(progress, str(data["call"]), lambda *_: None)(*data.get("args") or [])


def watch_request(
    cfg: Any, roots: list[str], files: FileOptions, description: str | None
) -> "tuple[str, protocol.WatchFollow] | None":
    """The database and ``watch.follow`` request when its service can watch *roots*
    exactly as this process would (a local database, the local ONNX model), else None."""
    from memsearch_fast.serve import client

    if not environment.flag(ENV_SERVICE):
        return None
    prepared = client.run_settings(cfg, ignore_files=files.ignore_file, exclude=files.exclude)
    if prepared is None:
        return None
    db_path, settings = prepared
    request: protocol.WatchFollow = {
        **settings,
        "op": "watch.follow",
        "roots": [str(Path(r).expanduser().resolve()) for r in roots],
        "debounce_ms": cfg.watch.debounce_ms,
        "holder": "watch",  # the service names the lease after the connection
        "pid": os.getpid(),
        "description": description or "",
    }
    return db_path, request


def follow(
    db_path: str, request: "protocol.WatchFollow", collection: str, out: "Events", early_stop: Any
) -> int | None:
    """Watch through the database's service: register the roots and print its events
    as this process's own. The exit code, or None when no service of this
    installation answers (the caller watches in process)."""
    import time

    roots = sorted(request["roots"])
    holder = _other_watcher(db_path, collection, roots)
    if holder is not None:  # a `memsearch watch` in a process of its own holds these roots
        out.event(
            f"memsearch watch is already running for these paths on collection '{collection}' "
            f"(pid {holder}); nothing to do",
            {"event": "already_running", "pid": holder, "roots": roots},
        )
        return 0
    watching = False
    failures = 0  # in a row, since the roots were last registered
    while failures <= RECONNECTS and not early_stop.is_set():
        if watching or failures:  # the service went away (killed, upgraded, stopped): start the next one
            why = "went away" if watching else "did not answer"
            out.error(
                f"error: the service of {db_path} {why}; trying again",
                {"event": "error", "error": f"the service {why}", "retry_in": float(failures)},
            )
            time.sleep(failures)
        stream = _open(db_path, request)
        if stream is None:
            failures += 1
            continue
        with stream:
            try:
                reply = _first(stream, early_stop)
            except (EOFError, OSError, ValueError):
                failures += 1
                continue
            if reply is None:
                break
            if reply.get("already_running"):
                out.event(
                    f"memsearch watch is already running for these paths on collection '{collection}' "
                    f"(pid {reply.get('pid')}); nothing to do",
                    {"event": "already_running", "pid": reply.get("pid"), "roots": reply.get("roots") or roots},
                )
                return 0
            if not reply.get("ok"):
                if "unsupported" in reply and not watching:
                    return None  # a service of another installation
                fail(f"the service of {db_path} cannot watch {', '.join(roots)}: {reply.get('error') or reply}")
            if not watching:
                out.event(
                    f"Watching {len(roots)} path(s) for changes (pid {os.getpid()}, in the service of {db_path}); "
                    "Ctrl-C to stop",
                    {"event": "watching", "pid": os.getpid(), "roots": roots, "service": db_path},
                )
                watching = True
            failures = 0
            code = _events(stream, out, early_stop, roots)
            if code is not None:
                return code
    if early_stop.is_set():
        out.event("Stopped watching: stopped", {"event": "stopped", "reason": "stopped"})
        return 0
    fail(f"cannot reach the service of {db_path}; stopped watching")


def _other_watcher(db_path: str, collection: str, roots: list[str]) -> int | None:
    """The pid of a watcher of exactly these roots that is not the service (one
    run with ``MEMSEARCH_WATCH_SERVICE=0``, or by another installation), else None."""
    from memsearch_fast.index.watch_lock import WatchLock, lock_base
    from memsearch_fast.serve import client

    lock = WatchLock(lock_base(db_path, collection, roots))
    if not lock.held():
        return None
    pid = lock.holder().pid
    st = client.server_record(db_path)
    return pid if pid is not None and (st is None or pid != st.get("pid")) else None


def _open(db_path: str, request: "protocol.WatchFollow") -> Any:
    """A stream from the database's service, started first where none runs."""
    from memsearch_fast.errors import one_line
    from memsearch_fast.serve import client

    if client.server_record(db_path) is None:
        try:
            client.ensure_server(db_path)
        except Exception as exc:  # noqa: BLE001 - said as one line; exit 1
            fail(f"cannot start the service of {db_path}: {one_line(exc)}")
    return client.open_stream(db_path, request)


def _first(stream: Any, early_stop: Any) -> dict[str, Any] | None:
    """The service's reply to the registration (None: stopped meanwhile)."""
    import time

    deadline = time.monotonic() + 30
    while not early_stop.is_set():
        reply = stream.read(0.25)
        if reply is not None:
            return dict(reply)
        if time.monotonic() > deadline:
            raise EOFError("no reply")
    return None


def _events(stream: Any, out: "Events", early_stop: Any, roots: list[str]) -> int | None:
    """Print the service's events until every root stopped (the exit code), a
    signal (0), or the service going away (None: connect again)."""
    left = set(roots)
    failed = False
    while True:
        if early_stop.is_set():
            out.event("Stopped watching: stopped", {"event": "stopped", "reason": "stopped"})
            return 0
        try:
            data = stream.read(0.25)
        except (EOFError, OSError, ValueError):
            return None
        if data is None:
            continue
        kind = data.get("event")
        root = data.pop("root", None)
        if kind == "stopped":
            if data.pop("service", None):
                return None
            left.discard(root)
            if not left:
                if not failed:
                    out.event(f"Stopped watching: {data.get('reason')}", data)
                return 1 if failed else 0
            continue
        failed = show(out, data) or failed


def show(out: "Events", data: dict[str, Any]) -> bool:
    """Print one watch event (a dict as :meth:`WatchEvent.as_dict` makes it); True for "failed"."""
    from types import SimpleNamespace

    from memsearch_fast.cli import display

    kind = data.get("event")
    if kind == "indexed":
        report = SimpleNamespace(**{**data, "failed": [(f["path"], f["reason"]) for f in data.get("failed") or []]})
        out.event(report_line(report), data)
        for line in display.format_failures(report):
            err(line)
    elif kind == "waiting":
        out.event(str(data.get("message")), data)
    elif kind == "error":
        out.error(f"error: {data.get('error')}; retrying in {float(data.get('retry_in') or 0):.0f} s", data)
    elif kind == "failed":
        out.error(f"Error: {data.get('error')}; stopped watching", data)
        return True
    return False


class Events:
    """Event lines on stderr (none with --quiet), or JSON lines on stdout with -j.

    Errors always reach stderr as one line.
    """

    def __init__(self, *, quiet: bool, json_lines: bool) -> None:
        self.quiet = quiet
        self.json_lines = json_lines

    def event(self, line: str, data: dict[str, Any]) -> None:
        if self.json_lines:
            from memsearch_fast.cli import display

            typer.echo(display.to_json_line(data))
        elif not self.quiet:
            err(line)

    def error(self, line: str, data: dict[str, Any]) -> None:
        err(line)
        if self.json_lines:
            self.event(line, data)


def report_line(report: Any) -> str:
    return (
        f"indexed: {report.changed} changed of {_plural(report.files, 'file')} ({report.read} read, "
        + (f"{max(0, report.files - report.read)} unchanged skipped unread" if report.manifest else "full run")
        + f"), {_plural(report.embedded, 'chunk')} embedded, "
        f"{report.reused} reused, {report.deleted} deleted, {_plural(report.sources_removed, 'file')} removed "
        f"({report.seconds:.2f} s)"
    )
