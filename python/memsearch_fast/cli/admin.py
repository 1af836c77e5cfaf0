"""`stats` and `reset`: look at or drop the index."""

from typing import Annotated

import typer

from memsearch_fast.cli.app import _fail, _guard, _stdin_is_tty, app
from memsearch_fast.cli.options import (
    Collection,
    DefaultCollection,
    JsonOutput,
    MilvusToken,
    MilvusUri,
    _memsearch,
    _missing_collection,
    _settings,
)


@app.command()
@_guard
def stats(
    collection: Collection = None,
    default_collection: DefaultCollection = None,
    milvus_uri: MilvusUri = None,
    milvus_token: MilvusToken = None,
    json_output: JsonOutput = False,
) -> None:
    """Show statistics about the index."""
    from memsearch_fast.cli import display

    cfg = _settings(default_collection, collection=collection, milvus_uri=milvus_uri, milvus_token=milvus_token)
    store = _memsearch(cfg)._read_store()
    try:
        if not store.exists:
            _fail(_missing_collection(cfg))
        info = {
            "chunks": store.count(),
            "files": store.count_sources(),
            "dimension": store.dimension,
            "collection": cfg["milvus"]["collection"],
            "uri": cfg["milvus"]["uri"],
            "provider": cfg["embedding"]["provider"],
            "model": cfg["embedding"]["model"],
        }
    finally:
        store.close()
    typer.echo(display.to_json(info) if json_output else display.format_stats(info))


@app.command()
@_guard
def reset(
    collection: Collection = None,
    default_collection: DefaultCollection = None,
    milvus_uri: MilvusUri = None,
    milvus_token: MilvusToken = None,
    yes: Annotated[bool, typer.Option("--yes", help="Confirm the action without prompting.")] = False,
) -> None:
    """Drop all indexed data."""
    cfg = _settings(default_collection, collection=collection, milvus_uri=milvus_uri, milvus_token=milvus_token)
    name = cfg["milvus"]["collection"]
    if not yes:
        if not _stdin_is_tty():
            _fail(f"refusing to drop collection '{name}' without confirmation; pass --yes")
        if not typer.confirm(f"This will delete all indexed data in collection '{name}'. Continue?"):
            _fail("aborted; nothing was dropped")
    store = _memsearch(cfg)._read_store()
    try:
        if not store.exists:
            typer.echo(f"Collection '{name}' does not exist; nothing to drop.")
            return
        store.drop()
    finally:
        store.close()
    typer.echo(f"Dropped collection '{name}'.")
