"""`mcp`: the recall verbs as a stdio MCP server for agents."""

from typing import Annotated

import typer

from memsearch_fast.cli.app import EXIT_USAGE, app, fail, guard, run
from memsearch_fast.cli.options import EMBEDDING, MILVUS, Flags, memsearch, missing_collection, settings, uses


@app.command("mcp")
@guard
@uses(MILVUS, EMBEDDING)
def mcp_command(
    opts: Flags,
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
        if opts.get("collection"):
            fail("--project and --collection both name the collection; give one", EXIT_USAGE)
        from memsearch_fast.agents.project import locate

        opts = {**opts, "collection": locate().collection}
    cfg = settings(opts)
    run(mcp_server.serve(lambda: memsearch(cfg, dense_index=True), missing=missing_collection(cfg)))
