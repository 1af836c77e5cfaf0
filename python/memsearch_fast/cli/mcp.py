"""`mcp`: the recall verbs as a stdio MCP server for agents."""

import dataclasses
from typing import Annotated

import typer

from memsearch_fast.cli.app import EXIT_USAGE, app, fail, guard, run
from memsearch_fast.cli.options import (
    EMBEDDING,
    MILVUS,
    EmbeddingOptions,
    MilvusOptions,
    flatten,
    memsearch,
    missing_collection,
    settings,
)


@app.command("mcp")
@guard
@flatten
def mcp_command(
    milvus: MilvusOptions = MILVUS,
    embedding: EmbeddingOptions = EMBEDDING,
    project: Annotated[
        bool,
        typer.Option(
            "--project",
            help="Serve the collection the agent hooks write for the project here "
            "(git top level of the current directory, or MEMSEARCH_DIR).",
        ),
    ] = False,
) -> None:
    """Serve memory tools to an MCP client over stdio.

    Tools: memory_search (search, with min_score/budget/digest), memory_expand,
    memory_get and memory_transcript, each answering what its command prints
    with -j. The model and the index stay loaded between calls; settings are
    resolved as for search; --project serves what the agent hooks write for
    the project. For Claude Code: claude mcp add memsearch -- memsearch mcp
    --project
    """
    from memsearch_fast.serve import mcp as mcp_server

    if project:
        if milvus.collection:
            fail("--project and --collection both name the collection; give one", EXIT_USAGE)
        from memsearch_fast.agents.project import locate

        milvus = dataclasses.replace(milvus, collection=locate().collection)
    cfg = settings(milvus, embedding)
    run(mcp_server.serve(lambda: memsearch(cfg, dense_index=True), missing=missing_collection(cfg)))
