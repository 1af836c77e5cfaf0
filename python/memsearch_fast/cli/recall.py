"""`search`, `expand`, `get` and `transcript`: the layers of recall."""

import sys
from typing import Annotated, Any

import typer

from memsearch_fast.cli.app import app, err, fail, guard, run
from memsearch_fast.cli.options import (
    EMBEDDING,
    MILVUS,
    EmbeddingOptions,
    JsonOutput,
    MilvusOptions,
    flatten,
    integer,
    memsearch,
    missing_collection,
    settings,
    text,
)
from memsearch_fast.config.tuning import DEFAULT_TOP_K


@app.command()
@guard
@flatten
def search(
    query: Annotated[str, typer.Argument(show_default=False, help="What to look for, in words.")],
    top_k: Annotated[int, integer("--top-k", "-k", min=0, help="Number of results.")] = DEFAULT_TOP_K,
    source_prefix: Annotated[
        str | None,
        typer.Option(
            "--source-prefix", metavar="PATH", help="Only search chunks whose source path starts with this prefix."
        ),
    ] = None,
    milvus: MilvusOptions = MILVUS,
    embedding: EmbeddingOptions = EMBEDDING,
    reranker_model: Annotated[
        str | None,
        text(
            "--reranker-model",
            help="Cross-encoder model for reranking (empty string disables): an ONNX model directory, "
            "a name imported with 'memsearch model import', or a hub id. Default: config reranker.model.",
        ),
    ] = None,
    json_output: JsonOutput = False,
    budget: Annotated[
        int | None,
        integer(
            "--budget",
            min=1,
            help="Print at most N tokens of hits (embedding model's tokenizer; whole hits only) "
            "and say how many were dropped.",
        ),
    ] = None,
    digest: Annotated[bool, typer.Option("--digest", help="One line per hit: source:start-end heading score.")] = False,
    min_score: Annotated[
        float | None, typer.Option("--min-score", metavar="FLOAT", help="Drop hits scoring below this.")
    ] = None,
    explain: Annotated[
        bool,
        typer.Option(
            "--explain",
            help="Show each hit's rank and score in the dense and BM25 lists and the fused score "
            "(and the reranker's logit and fused rank when reranking).",
        ),
    ] = False,
    sync: Annotated[
        bool | None,
        typer.Option(
            "--sync/--no-sync",
            show_default=False,
            help="First re-index the files changed since the collection's paths were last indexed "
            "(a stat per unchanged file; skipped while a watcher runs). Default: config search.sync.",
        ),
    ] = None,
) -> None:
    """Search indexed memory for QUERY.

    Agent tiers: --min-score filters, --digest prints one line per hit,
    --budget caps the output at N tokens. With any of them, -j prints an
    object {results, dropped, below_min_score, budget, tokens, tokenizer}
    instead of the bare list.
    """
    from memsearch_fast.recall import search as recall

    cfg = settings(milvus, embedding, reranker_model=reranker_model)
    lazy = sync if sync is not None else cfg.search.sync == "lazy"
    if not lazy:
        # The database's running server answers it with pymilvus and the model
        # already loaded; None: it cannot, and this process searches itself.
        from memsearch_fast.serve import protocol
        from memsearch_fast.serve import search as search_service

        tiers: protocol.Render = {
            "json_output": json_output,
            "digest": digest,
            "budget": budget,
            "min_score": min_score,
        }
        served = search_service.ask(
            cfg, query, render=tiers, top_k=top_k or DEFAULT_TOP_K, source_prefix=source_prefix, explain=explain
        )
        if served is not None:
            typer.echo(served)
            return
    ms = memsearch(cfg)

    async def search_now() -> str:
        if lazy:
            await _sync(ms, json_output)
        return await recall.tiered_search(
            ms,
            query,
            top_k=top_k or DEFAULT_TOP_K,  # -k 0 is the default, as in memsearch 0.4.23
            source_prefix=source_prefix,
            json_output=json_output,
            digest=digest,
            budget=budget,
            min_score=min_score,
            explain=explain,
        )

    try:
        # Checked before loading a model: a search must not create an empty collection.
        if not ms.collection_exists():
            fail(missing_collection(cfg))
        output = run(search_now())
    finally:
        ms.close()
    typer.echo(output)


async def _sync(ms: Any, json_output: bool) -> None:
    """Lazy sync before a search: a problem is one warning line and the search goes on;
    with -j the report is a JSON line on stderr (stdout stays the search's)."""
    from memsearch_fast.cli import display

    report = await ms.sync()
    warning = report.warning()
    if warning:
        err(f"warning: {warning}; searching the index as it is")
    if json_output:
        err(display.to_json_line({"event": "sync", **report.as_dict()}))


@app.command()
@guard
@flatten
def expand(
    chunk_hash: Annotated[str, typer.Argument(show_default=False, help="A chunk_hash from search results.")],
    section: Annotated[
        bool,
        typer.Option(
            "--section/--no-section", help="Show full heading section (default) or only the chunk's own lines."
        ),
    ] = True,
    lines: Annotated[
        int | None, integer("--lines", "-n", min=0, help="Show N lines before/after instead of full section.")
    ] = None,
    json_output: JsonOutput = False,
    milvus: MilvusOptions = MILVUS,
    embedding: EmbeddingOptions = EMBEDDING,
) -> None:
    """Expand a memory chunk to show full context.

    Look up CHUNK_HASH in the index, then read the source markdown file to
    return the surrounding context (full heading section by default, or the
    chunk's own lines with --no-section).

    Part of the progressive disclosure workflow (search -> expand ->
    transcript).
    """
    from memsearch_fast.cli import display
    from memsearch_fast.serve import reads

    cfg = settings(milvus, embedding)
    result = reads.expand(cfg, chunk_hash, section=section, lines=lines)
    if result is None:  # no service, or an answer this process gives with its reason
        ms = memsearch(cfg)
        try:
            result = ms.expand(chunk_hash, section=section, lines=lines)
            if result is None:
                if not ms.collection_exists():
                    fail(missing_collection(cfg))
                fail(f"chunk not found: {chunk_hash}")
        finally:
            ms.close()
    warning = result.pop("warning", None)
    if warning:
        err(f"warning: {warning}")
    typer.echo(display.to_json(result) if json_output else display.format_expand(result))


@app.command()
@guard
@flatten
def get(
    path: Annotated[str, typer.Argument(show_default=False, help="An indexed markdown file.")],
    start: Annotated[int, integer("--from", min=1, help="First line to print (1-based).")] = 1,
    count: Annotated[
        int | None, integer("--lines", "-n", min=0, show_default=False, help="Number of lines (default: to the end).")
    ] = None,
    json_output: JsonOutput = False,
    milvus: MilvusOptions = MILVUS,
) -> None:
    """Print lines of an indexed markdown file (OpenClaw's memory_get).

    Only files stored in the index can be read: the real path (symlinks
    resolved) must be an indexed source, so paths outside the indexed roots
    are refused. -j prints {path, from, lines, total_lines, content}.
    """
    from memsearch_fast.cli import display

    cfg = settings(milvus)
    ms = memsearch(cfg)
    try:
        result = ms.get(path, start=start, count=count)
        if result is None:
            fail(missing_collection(cfg))
    finally:
        ms.close()
    typer.echo(display.to_json(result) if json_output else display.format_get(result))


def _not_negative(value: int) -> int:
    if value < 0:
        raise typer.BadParameter(f"{value} is not in the range x>=0.")
    return value


@app.command()
@guard
def transcript(
    path: Annotated[str, typer.Argument(show_default=False, help="Session transcript (JSONL).")],
    turn: Annotated[
        str | None,
        text("--turn", "-t", help="Target turn/session id (prefix match); shows surrounding context."),
    ] = None,
    context: Annotated[
        int,
        integer(
            "--context",
            "-c",
            show_default=False,
            callback=_not_negative,
            help="Turns of context to show before/after --turn.",
        ),
    ] = 3,
    exchange: Annotated[
        bool,
        typer.Option(
            "--exchange",
            "-x",
            # Not in --help, which stays memsearch 0.4.23's word for word; README describes it.
            hidden=True,
            help="Show --turn's whole exchange (its prompt and every reply record) and count --context in exchanges.",
        ),
    ] = False,
    json_output: JsonOutput = False,
) -> None:
    """Show original conversation turns, with tool calls, from a session transcript.

    L3 of progressive recall (search -> expand -> transcript): pass the
    transcript path from a journal anchor to recover the exact commands,
    flags, and paths the journal summary drops. Auto-detects Claude Code /
    Codex / OpenClaw formats.
    """
    from memsearch_fast.recall import transcript as transcripts

    if json_output:
        # Streamed: a long session is written turn by turn, never held whole.
        transcripts.write_json(path, sys.stdout.write, turn=turn, context=context, exchange=exchange)
        sys.stdout.write("\n")
        sys.stdout.flush()
    else:
        typer.echo(transcripts.show_text(path, turn=turn, context=context, exchange=exchange))
