"""`mcp`: the recall verbs as a stdio MCP server for agents."""

from memsearch_fast.cli.app import app, guard, run
from memsearch_fast.cli.options import EMBEDDING, MILVUS, Flags, memsearch, missing_collection, settings, uses


@app.command("mcp")
@guard
@uses(MILVUS, EMBEDDING)
def mcp_command(opts: Flags) -> None:
    """Serve memory tools to an MCP client over stdio.

    Tools: memory_search (search, with min_score/budget/digest), memory_expand,
    memory_get and memory_transcript, each answering what its command prints
    with -j. The model and the index stay loaded between calls; settings are
    resolved as for search. For Claude Code: claude mcp add memsearch --
    memsearch mcp
    """
    from memsearch_fast import mcp_server

    cfg = settings(opts)
    run(mcp_server.serve(lambda: memsearch(cfg), missing=missing_collection(cfg)))
