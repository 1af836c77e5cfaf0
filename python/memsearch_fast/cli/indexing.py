"""`index` and `watch`: keep the index in step with the markdown files."""

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import typer

from memsearch_fast.cli.app import EXIT_USAGE, app, err, fail, guard, run
from memsearch_fast.cli.options import (
    EMBEDDING,
    FILES,
    MILVUS,
    Description,
    EmbeddingOptions,
    FileOptions,
    MaxChunkSize,
    MilvusOptions,
    flatten,
    integer,
    memsearch,
    settings,
)

Paths = Annotated[list[str], typer.Argument(show_default=False, help="Markdown files or directories.")]

WORKERS_HELP = (
    "Parallelism: sets the Rust threads that read and chunk files, the ONNX inference workers "
    "and the concurrent requests of an HTTP provider (default: every core for chunking, "
    "min(4, cores) inference workers, 4 requests)."
)


@app.command()
@guard
@flatten
def index(
    paths: Paths,
    milvus: MilvusOptions = MILVUS,
    embedding: EmbeddingOptions = EMBEDDING,
    files: FileOptions = FILES,
    force: Annotated[bool, typer.Option("--force", help="Re-index all files.")] = False,
    max_chunk_size: MaxChunkSize = None,
    description: Description = None,
    workers: Annotated[int | None, integer("--workers", min=1, help=WORKERS_HELP)] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar and no summary.")] = False,
    json_output: Annotated[
        bool,
        typer.Option("--json-output", "-j", help="Print the summary as JSON (and progress as JSON lines on stderr)."),
    ] = False,
) -> None:
    """Index markdown files from PATHS.

    One writer per collection: a second `index` (or a `watch` run) on the same
    collection waits for this one, saying whose run it waits for; searches
    never wait. SIGTERM ends it as Ctrl-C does: what was embedded is written
    and flushed, exit 130.
    """
    from memsearch_fast.cli import display
    from memsearch_fast.store.manifest import Manifest

    for p in paths:
        if not os.path.exists(os.path.expanduser(p)):
            fail(f"path does not exist: {p}", EXIT_USAGE)
    cfg = settings(milvus, embedding, max_chunk_size=max_chunk_size)
    ms = memsearch(cfg, paths, files, description, workers=workers)
    _check_database(ms.uri)
    writer = Manifest.for_store(ms.uri, ms.collection)
    writer.on_wait = err
    progress = display.make_progress(quiet=quiet, json_lines=json_output)
    try:
        # The writer lock covers the scan: a run that waited indexes the tree
        # as the run before it left it.
        with _sigterm_as_sigint(), writer.writer(), _no_stray_lock(ms.uri, writer.lock_path):
            report = run(ms.index_with_report(force=force, progress=progress))
    finally:
        progress.finish()
        ms.close()
    if json_output:
        typer.echo(display.to_json(display.index_report_dict(report)))
    elif not quiet:
        typer.echo(display.format_index_report(report))
    for line in display.format_failures(report):
        err(line)
    if report.failed:
        raise typer.Exit(1)


@app.command()
@guard
@flatten
def watch(
    paths: Paths,
    milvus: MilvusOptions = MILVUS,
    embedding: EmbeddingOptions = EMBEDDING,
    files: FileOptions = FILES,
    debounce_ms: Annotated[
        int | None, integer("--debounce-ms", min=0, help="Debounce delay in ms (quiet time before a re-index).")
    ] = None,
    max_chunk_size: MaxChunkSize = None,
    description: Description = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No event lines (errors still go to stderr).")] = False,
    json_output: Annotated[
        bool, typer.Option("--json-output", "-j", help="One JSON line per event on stdout, for tools.")
    ] = False,
) -> None:
    """Watch PATHS for markdown changes and auto-index.

    Indexes PATHS now, then again after every burst of changes; a second
    watcher of the same paths and collection exits at once. SIGINT or
    SIGTERM finish the run in hand, flush, and exit 0.
    """
    import signal
    import threading

    from memsearch_fast.index.watch_lock import WatchLock, lock_base

    # A signal before the event loop runs must stop it too, not kill the process.
    early_stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: early_stop.set())
    for p in paths:
        if not os.path.exists(os.path.expanduser(p)):
            fail(f"path does not exist: {p}", EXIT_USAGE)
    cfg = settings(milvus, embedding, max_chunk_size=max_chunk_size, debounce_ms=debounce_ms)
    roots = [str(Path(p).expanduser().resolve()) for p in paths]
    out = _Events(quiet=quiet, json_lines=json_output)
    served = _served(cfg, roots, files, description)
    if served is not None:
        _check_database(served[0])
        code = _follow(*served, cfg.milvus.collection, out, early_stop)
        if code is not None:
            raise typer.Exit(code)
    ms = memsearch(cfg, paths, files, description)
    _check_database(ms.uri)
    lock = WatchLock(lock_base(ms.uri, ms.collection, roots))
    try:
        if not lock.acquire(roots):
            holder = lock.holder()
            who = f"pid {holder.pid}" if holder.pid else "another process"
            out.event(
                f"memsearch watch is already running for these paths on collection '{ms.collection}' ({who}); "
                "nothing to do",
                {"event": "already_running", "pid": holder.pid, "roots": holder.roots or roots},
            )
            return
        out.event(
            f"Watching {len(roots)} path(s) for changes (pid {os.getpid()}); Ctrl-C to stop",
            {"event": "watching", "pid": os.getpid(), "roots": roots},
        )
        with _no_stray_lock(ms.uri, lock.lock_path):
            run(_watch(ms, cfg.watch.debounce_ms, out, early_stop))
    finally:
        lock.release()
        ms.close()


#: Set to 0 (or off/false/no) and `memsearch watch` runs its own watcher and model
#: even where the database's service could watch for it.
ENV_SERVICE = "MEMSEARCH_WATCH_SERVICE"
#: Times in a row `memsearch watch` tries to reach a service that went away.
RECONNECTS = 5


def _served(cfg: Any, roots: list[str], files: FileOptions, description: str | None) -> tuple[str, Any] | None:
    """The database and ``watch.follow`` request when its service can watch *roots*
    exactly as this process would (a local database, the local ONNX model), else None."""
    from memsearch_fast.serve import client

    if os.environ.get(ENV_SERVICE, "").strip().lower() in ("0", "off", "false", "no"):
        return None
    prepared = client.lease_request(
        cfg, roots, holder="watch", pid=os.getpid(), ignore_files=files.ignore_file, exclude=files.exclude
    )
    if prepared is None:
        return None
    db_path, request = prepared
    return db_path, {**request, "op": "watch.follow", "description": description or ""}


def _follow(db_path: str, request: dict[str, Any], collection: str, out: "_Events", early_stop: Any) -> int | None:
    """Watch through the database's service: register the roots and print its events
    as this process's own. The exit code, or None when no service of this
    installation answers (the caller watches in process)."""
    import time

    roots = sorted(request["roots"])
    watching = False
    for attempt in range(RECONNECTS + 1):
        if early_stop.is_set():
            break
        if attempt:  # the service went away (killed, upgraded, stopped): start the next one
            out.error(
                f"error: the service of {db_path} went away; watching again",
                {"event": "error", "error": "the service went away", "retry_in": float(attempt - 1)},
            )
            time.sleep(attempt - 1)
        stream = _open(db_path, request)
        if stream is None:
            continue
        with stream:
            try:
                reply = _first(stream, early_stop)
            except (EOFError, OSError, ValueError):
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
            code = _events(stream, out, early_stop, roots)
            if code is not None:
                return code
    if early_stop.is_set():
        out.event("Stopped watching: stopped", {"event": "stopped", "reason": "stopped"})
        return 0
    fail(f"cannot reach the service of {db_path}; stopped watching")


def _open(db_path: str, request: dict[str, Any]) -> Any:
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


def _events(stream: Any, out: "_Events", early_stop: Any, roots: list[str]) -> int | None:
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
        failed = _show(out, data) or failed


def _show(out: "_Events", data: dict[str, Any]) -> bool:
    """Print one watch event (a dict as :meth:`WatchEvent.as_dict` makes it); True for "failed"."""
    from types import SimpleNamespace

    from memsearch_fast.cli import display

    kind = data.get("event")
    if kind == "indexed":
        report = SimpleNamespace(**{**data, "failed": [(f["path"], f["reason"]) for f in data.get("failed") or []]})
        out.event(_report_line(report), data)
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


def _check_database(uri: str) -> None:
    """Refuse a local path the installed Milvus Lite cannot use before any
    lock file is made beside it (the store would refuse it later anyway)."""
    from memsearch_fast.lite.sidecars import check_layout
    from memsearch_fast.store.compat import is_local_uri

    if is_local_uri(uri):
        check_layout(os.path.abspath(os.path.expanduser(uri)))


@contextlib.contextmanager
def _no_stray_lock(uri: str, lock_path: Path) -> Iterator[None]:
    """A run that fails before its local database exists removes the lock
    file it made beside that database (while it still holds the lock), so a
    failed first run leaves no file behind."""
    try:
        yield
    except BaseException:
        from memsearch_fast.store.compat import is_local_uri

        if is_local_uri(uri) and not os.path.lexists(os.path.expanduser(uri)):
            with contextlib.suppress(OSError):
                os.unlink(lock_path)
        raise


@contextlib.contextmanager
def _sigterm_as_sigint() -> Iterator[None]:
    """SIGTERM (a service manager, `timeout`) handled as Ctrl-C: the event loop
    turns SIGINT into a cancellation that writes and flushes what is done."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    # A shell script's background job (`memsearch index … &`) starts with SIGINT
    # ignored: SIGTERM, turned into SIGINT, would then be ignored too.
    ignored = signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    if ignored:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    previous = signal.signal(signal.SIGTERM, lambda *_: os.kill(os.getpid(), signal.SIGINT))
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
        if ignored:
            signal.signal(signal.SIGINT, signal.SIG_IGN)


class _Events:
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


async def _watch(ms: Any, debounce_ms: int, out: _Events, early_stop: Any) -> None:
    import asyncio
    import signal

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    if early_stop.is_set():
        stop.set()
    failed = False
    ms.on_wait = lambda line: out.event(line, {"event": "waiting", "message": line})
    async for event in ms.watch(debounce_ms=debounce_ms, stop=stop):
        if event.kind == "stopped":
            if not failed:  # a "failed" event said why already
                out.event(f"Stopped watching: {event.error or 'stopped'}", event.as_dict())
        else:
            failed = _show(out, event.as_dict()) or failed
    if failed:
        raise typer.Exit(1)


def _report_line(report: Any) -> str:
    return (
        f"indexed: {report.changed} changed of {report.files} files ({report.read} read, "
        + (f"{max(0, report.files - report.read)} skipped by the manifest" if report.manifest else "full run")
        + f"), {report.embedded} chunks embedded, "
        f"{report.reused} reused, {report.deleted} deleted, {report.sources_removed} files removed "
        f"({report.seconds:.2f} s)"
    )
