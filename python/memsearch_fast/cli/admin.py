"""`stats` and `reset`: look at or drop the index."""

from typing import Annotated

import typer

from memsearch_fast.cli.app import app, err, fail, guard, stdin_is_tty
from memsearch_fast.cli.options import (
    MILVUS,
    JsonOutput,
    MilvusOptions,
    flatten,
    memsearch,
    missing_collection,
    settings,
)


@app.command()
@guard
@flatten
def stats(
    milvus: MilvusOptions = MILVUS,
    json_output: JsonOutput = False,
) -> None:
    """Show statistics about the index."""
    from memsearch_fast.cli import display

    cfg = settings(milvus)
    ms = memsearch(cfg)
    try:
        counts = ms.stats()
    finally:
        ms.close()
    if counts is None:
        fail(missing_collection(cfg))
    info = {
        **counts,
        "collection": cfg.milvus.collection,
        "uri": cfg.milvus.uri,
        "provider": cfg.embedding.provider,
        "model": cfg.embedding.model,
    }
    typer.echo(display.to_json(info) if json_output else display.format_stats(info))


@app.command()
@guard
@flatten
def reset(
    milvus: MilvusOptions = MILVUS,
    yes: Annotated[bool, typer.Option("--yes", help="Confirm the action without prompting.")] = False,
) -> None:
    """Drop all indexed data."""
    cfg = settings(milvus)
    name = cfg.milvus.collection
    if not yes:
        question = f"This will delete all indexed data in collection '{name}'. Continue?"
        if stdin_is_tty():
            if not typer.confirm(question):
                fail("aborted; nothing was dropped")
        else:
            # A piped answer counts, as with 0.4.23 (`echo y | memsearch reset`);
            # no answer (a closed or empty stdin) drops nothing.
            import sys

            answer = sys.stdin.readline() if sys.stdin is not None else ""
            if answer.strip().lower() not in ("y", "yes"):
                fail(f"refusing to drop collection '{name}' without confirmation; pass --yes (or pipe 'y')")
    ms = memsearch(cfg)
    try:
        dropped = ms.drop(on_wait=err)
    finally:
        ms.close()
    if not dropped:
        typer.echo(f"Collection '{name}' does not exist; nothing to drop.")
        return
    typer.echo(f"Dropped collection '{name}'.")
