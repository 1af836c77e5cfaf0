"""`search`, `expand` and `transcript`: the three layers of recall."""

from typing import Annotated, Optional

import typer

from memsearch_fast.cli.app import _err, _fail, _guard, _not_available, _run, app
from memsearch_fast.cli.options import (
    ApiKey,
    BaseUrl,
    BatchSize,
    Collection,
    DefaultCollection,
    JsonOutput,
    MilvusToken,
    MilvusUri,
    Model,
    Provider,
    _collection_exists,
    _int,
    _memsearch,
    _missing_collection,
    _settings,
    _text,
)


@app.command()
@_guard
def search(
    query: Annotated[str, typer.Argument(metavar="QUERY", show_default=False)],
    top_k: Annotated[int, _int("--top-k", "-k", min=1, help="Number of results.")] = 5,
    source_prefix: Annotated[
        Optional[str],
        typer.Option(
            "--source-prefix", metavar="PATH", help="Only search chunks whose source path starts with this prefix."
        ),
    ] = None,
    milvus_token: MilvusToken = None,
    milvus_uri: MilvusUri = None,
    default_collection: DefaultCollection = None,
    collection: Collection = None,
    api_key: ApiKey = None,
    base_url: BaseUrl = None,
    batch_size: BatchSize = None,
    model: Model = None,
    provider: Provider = None,
    reranker_model: Annotated[
        Optional[str],
        _text("--reranker-model", help="Cross-encoder model for reranking (empty string disables)."),
    ] = None,
    json_output: JsonOutput = False,
) -> None:
    """Search indexed memory for QUERY."""
    from memsearch_fast.cli import display

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
        reranker_model=reranker_model,
    )
    if reranker_model:
        _err("warning: reranking is not supported by this version; --reranker-model is ignored")
    ms = _memsearch(cfg)
    try:
        if not _collection_exists(ms):
            _fail(_missing_collection(cfg))
        results = _run(ms.search(query, top_k=top_k, source_prefix=source_prefix))
    finally:
        ms.close()
    typer.echo(display.to_json(results) if json_output else display.format_search(results))


@app.command()
@_guard
def expand(
    chunk_hash: Annotated[str, typer.Argument(metavar="CHUNK_HASH", show_default=False)],
    section: Annotated[
        bool,
        typer.Option(
            "--section/--no-section", help="Show full heading section (default) or only the chunk's own lines."
        ),
    ] = True,
    lines: Annotated[
        Optional[int], _int("--lines", "-n", min=0, help="Show N lines before/after instead of full section.")
    ] = None,
    json_output: JsonOutput = False,
    milvus_token: MilvusToken = None,
    milvus_uri: MilvusUri = None,
    default_collection: DefaultCollection = None,
    collection: Collection = None,
    api_key: ApiKey = None,
    base_url: BaseUrl = None,
    batch_size: BatchSize = None,
    model: Model = None,
    provider: Provider = None,
) -> None:
    """Expand a memory chunk to show full context.

    Look up CHUNK_HASH in the index, then read the source markdown file to
    return the surrounding context (full heading section by default, or the
    chunk's own lines with --no-section).

    Part of the progressive disclosure workflow (search -> expand ->
    transcript).
    """
    from memsearch_fast.cli import display

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
    )
    ms = _memsearch(cfg)
    try:
        result = ms.expand(chunk_hash, section=section, lines=lines)
        if result is None:
            if not _collection_exists(ms):
                _fail(_missing_collection(cfg))
            _fail(f"chunk not found: {chunk_hash}")
    finally:
        ms.close()
    warning = result.pop("warning", None)
    if warning:
        _err(f"warning: {warning}")
    typer.echo(display.to_json(result) if json_output else display.format_expand(result))


@app.command()
@_guard
def transcript(
    path: Annotated[str, typer.Argument(metavar="PATH", show_default=False)],
    turn: Annotated[
        Optional[str],
        _text("--turn", "-t", help="Target turn/session id (prefix match); shows surrounding context."),
    ] = None,
    context: Annotated[int, _int("--context", "-c", help="Turns of context to show before/after --turn.")] = 3,
    json_output: JsonOutput = False,
) -> None:
    """Show original conversation turns, with tool calls, from a session transcript.

    L3 of progressive recall (search -> expand -> transcript): pass the
    transcript path from a journal anchor to recover the exact commands,
    flags, and paths the journal summary drops.
    """
    _not_available("transcript")
