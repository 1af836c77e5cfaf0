"""`index` and `watch`: keep the index in step with the markdown files."""

import os
from typing import Annotated, Optional

import typer

from memsearch_fast.cli.app import (
    EXIT_USAGE,
    _err,
    _fail,
    _guard,
    _not_available,
    _run,
    app,
)
from memsearch_fast.cli.options import (
    ApiKey,
    BaseUrl,
    BatchSize,
    Collection,
    DefaultCollection,
    Description,
    Exclude,
    IgnoreFile,
    MaxChunkSize,
    MilvusToken,
    MilvusUri,
    Model,
    Provider,
    _int,
    _memsearch,
    _settings,
)


@app.command()
@_guard
def index(
    paths: Annotated[list[str], typer.Argument(metavar="PATHS", show_default=False)],
    milvus_token: MilvusToken = None,
    milvus_uri: MilvusUri = None,
    default_collection: DefaultCollection = None,
    collection: Collection = None,
    api_key: ApiKey = None,
    base_url: BaseUrl = None,
    batch_size: BatchSize = None,
    model: Model = None,
    provider: Provider = None,
    exclude: Exclude = None,
    ignore_file: IgnoreFile = None,
    force: Annotated[bool, typer.Option("--force", help="Re-index all files.")] = False,
    max_chunk_size: MaxChunkSize = None,
    description: Description = None,
    workers: Annotated[
        Optional[int], _int("--workers", min=1, help="Parallel inference/chunking workers (default: CPU count).")
    ] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar and no summary.")] = False,
    json_output: Annotated[bool, typer.Option("--json-output", "-j", help="Print the summary as JSON.")] = False,
) -> None:
    """Index markdown files from PATHS."""
    from memsearch_fast.cli import display

    for p in paths:
        if not os.path.exists(os.path.expanduser(p)):
            _fail(f"path does not exist: {p}", EXIT_USAGE)
    cfg = _settings(
        default_collection,
        provider=provider,
        model=model,
        batch_size=batch_size,
        base_url=base_url,
        api_key=api_key,
        collection=collection,
        milvus_uri=milvus_uri,
        milvus_token=milvus_token,
        max_chunk_size=max_chunk_size,
    )
    ms = _memsearch(
        cfg,
        paths,
        exclude=exclude or (),
        ignore_files=ignore_file or (),
        description=description or "",
        workers=workers,
    )
    progress = display.make_progress(quiet=quiet or json_output)
    try:
        report = _run(ms.index_with_report(force=force, progress=progress))
    finally:
        progress.finish()
        ms.close()
    if json_output:
        typer.echo(display.to_json(display.index_report_dict(report)))
    elif not quiet:
        typer.echo(display.format_index_report(report))
    for line in display.format_failures(report):
        _err(line)
    if report.failed:
        raise typer.Exit(1)


@app.command()
@_guard
def watch(
    paths: Annotated[list[str], typer.Argument(metavar="PATHS", show_default=False)],
    milvus_token: MilvusToken = None,
    milvus_uri: MilvusUri = None,
    default_collection: DefaultCollection = None,
    collection: Collection = None,
    api_key: ApiKey = None,
    base_url: BaseUrl = None,
    batch_size: BatchSize = None,
    model: Model = None,
    provider: Provider = None,
    exclude: Exclude = None,
    ignore_file: IgnoreFile = None,
    debounce_ms: Annotated[Optional[int], _int("--debounce-ms", help="Debounce delay in ms.")] = None,
    max_chunk_size: MaxChunkSize = None,
    description: Description = None,
) -> None:
    """Watch PATHS for markdown changes and auto-index."""
    _not_available("watch")
