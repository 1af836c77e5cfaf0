"""`index` and `watch`: keep the index in step with the markdown files."""

import os
from typing import Annotated

import typer

from memsearch_fast.cli.app import EXIT_USAGE, app, err, fail, guard, not_available, run
from memsearch_fast.cli.options import (
    EMBEDDING,
    FILES,
    MILVUS,
    Description,
    Flags,
    MaxChunkSize,
    integer,
    memsearch,
    settings,
    uses,
)

Paths = Annotated[list[str], typer.Argument(show_default=False, help="Markdown files or directories.")]

WORKERS_HELP = (
    "Parallelism: sets the Rust threads that read and chunk files, the ONNX inference workers "
    "and the concurrent requests of an HTTP provider (default: every core for chunking, "
    "min(4, cores) inference workers, 4 requests)."
)


@app.command()
@guard
@uses(MILVUS, EMBEDDING, FILES)
def index(
    paths: Paths,
    opts: Flags,
    force: Annotated[bool, typer.Option("--force", help="Re-index all files.")] = False,
    max_chunk_size: MaxChunkSize = None,
    description: Description = None,
    workers: Annotated[int | None, integer("--workers", min=1, help=WORKERS_HELP)] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar and no summary.")] = False,
    json_output: Annotated[bool, typer.Option("--json-output", "-j", help="Print the summary as JSON.")] = False,
) -> None:
    """Index markdown files from PATHS."""
    from memsearch_fast.cli import display

    for p in paths:
        if not os.path.exists(os.path.expanduser(p)):
            fail(f"path does not exist: {p}", EXIT_USAGE)
    cfg = settings(opts, max_chunk_size=max_chunk_size)
    ms = memsearch(cfg, paths, {**opts, "description": description}, workers=workers)
    progress = display.make_progress(quiet=quiet or json_output)
    try:
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


@app.command(hidden=True)  # listed once it works
@guard
@uses(MILVUS, EMBEDDING, FILES)
def watch(
    paths: Paths,
    opts: Flags,
    debounce_ms: Annotated[int | None, integer("--debounce-ms", help="Debounce delay in ms.")] = None,
    max_chunk_size: MaxChunkSize = None,
    description: Description = None,
) -> None:
    """Watch PATHS for markdown changes and auto-index."""
    not_available("watch")
