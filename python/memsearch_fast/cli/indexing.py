"""`index` and `watch`: keep the index in step with the markdown files."""

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import typer

from memsearch_fast.cli import served
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

    for p in paths:
        if not os.path.exists(os.path.expanduser(p)):
            fail(f"path does not exist: {p}", EXIT_USAGE)
    cfg = settings(milvus, embedding, max_chunk_size=max_chunk_size)
    # An explicit --workers asks for this process's pools; otherwise a service holding the model runs it.
    service = None if workers is not None else served.index_request(cfg, paths, files, description, force=force)
    report = None
    # One handler from the hand-over to this process's own run, so a SIGTERM
    # between the two (a service gone mid-run) also ends in exit 130.
    with _sigterm_as_sigint():
        if service is not None:
            _check_database(service[0])
            progress = display.make_progress(quiet=quiet, json_lines=json_output)
            try:
                report = served.index_run(*service, progress)
            finally:
                progress.finish()
        if report is None:
            report = _index_here(cfg, paths, files, description, workers, force, quiet, json_output)
    if json_output:
        typer.echo(display.to_json(display.index_report_dict(report)))
    elif not quiet:
        typer.echo(display.format_index_report(report))
    for line in display.format_failures(report):
        err(line)
    _size_note(cfg)
    if report.failed:
        raise typer.Exit(1)


def _size_note(cfg: Any) -> None:
    """One line when the local database has grown past what Milvus Lite serves well."""
    from pathlib import Path

    from memsearch_fast.lite.size import too_large
    from memsearch_fast.store.compat import is_local_uri

    uri = str(cfg.milvus.uri)  # the switch away from a 3.x database applied (cli.options.settings)
    if is_local_uri(uri) and (note := too_large(str(Path(uri).expanduser().resolve()))):
        err(note)


def _index_here(
    cfg: Any,
    paths: list[str],
    files: FileOptions,
    description: str | None,
    workers: int | None,
    force: bool,
    quiet: bool,
    json_output: bool,
) -> Any:
    """The index run in this process, with its own model."""
    from memsearch_fast.cli import display
    from memsearch_fast.store.manifest import Manifest

    _cap_heap_arenas(cfg)
    ms = memsearch(cfg, paths, files, description, workers=workers)
    _check_database(ms.uri)
    writer = Manifest.for_store(ms.uri, ms.collection, err)
    progress = display.make_progress(quiet=quiet, json_lines=json_output)
    try:
        # The writer lock covers the scan: a run that waited indexes the tree
        # as the run before it left it.
        with _sigterm_as_sigint(), writer.writer(), _nothing_left_by_a_failed_first_run(ms, writer.lock_path):
            return run(ms.index_with_report(force=force, progress=progress))
    finally:
        progress.finish()
        ms.close()


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
    out = served.Events(quiet=quiet, json_lines=json_output)
    service = served.watch_request(cfg, roots, files, description)
    if service is not None:
        _check_database(service[0])
        code = served.follow(*service, cfg.milvus.collection, out, early_stop)
        if code is not None:
            raise typer.Exit(code)
    _cap_heap_arenas(cfg)
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


def _cap_heap_arenas(cfg: Any) -> None:
    """Fewer heap arenas for a run whose vectors come from elsewhere: its peak RSS at
    50 MB of journals 650 → 540 MB. A model in this process is left its arenas: its
    inference threads contend for fewer (2.3 % slower, no memory saved)."""
    from memsearch_fast._os import cap_heap_arenas
    from memsearch_fast.embeddings import IN_PROCESS

    if cfg.embedding.provider not in IN_PROCESS:
        cap_heap_arenas()


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
def _nothing_left_by_a_failed_first_run(ms: Any, lock_path: Path) -> Iterator[None]:
    """A run that creates its local database and fails before it writes a chunk
    (no network, a rejected key, Ctrl-C while the model loads) leaves no
    database, side file or server behind: nothing the user got value from. A
    run that wrote some chunks keeps them (the next run completes the index),
    and so does a database another collection has begun to use meanwhile."""
    from memsearch_fast.store.compat import is_local_uri

    db = Path(ms.uri).expanduser()
    fresh = is_local_uri(ms.uri) and not os.path.lexists(db)
    # The writer lock goes by the rule of _no_stray_lock: only once no database is left,
    # never from under a kept database whose next writer may be waiting on it.
    with _no_stray_lock(ms.uri, lock_path):
        try:
            yield
        except BaseException:
            if fresh and os.path.lexists(db):
                with contextlib.suppress(Exception):
                    _discard_if_empty(ms, db)
            raise


def _discard_if_empty(ms: Any, db: Path) -> None:
    import glob

    from memsearch_fast.lite import broker
    from memsearch_fast.lite.sidecars import sidecar_paths

    store = ms.store
    ours = {ms.collection, ms.collection + "_spans"}
    others = set(store._call("list", lambda c: c.list_collections())) - ours
    if others or (store.exists and store.count()):
        return
    ms.close()
    real = str(db.resolve())
    broker.stop_server(real)
    escaped = glob.escape(str(db))
    spans = real + ".spans"
    leftovers = [real, *sidecar_paths(real).values(), str(db.with_name(f".{db.name}.lock"))]
    leftovers += [spans, spans + "-wal", spans + "-shm"]
    for path in [*leftovers, *glob.glob(escaped + ".manifest-*"), *glob.glob(escaped + ".copy-*")]:
        with contextlib.suppress(OSError):
            os.unlink(path)


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


async def _watch(ms: Any, debounce_ms: int, out: served.Events, early_stop: Any) -> None:
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
            failed = served.show(out, event.as_dict()) or failed
    if failed:
        raise typer.Exit(1)
