"""Long-lived processes that answer others: the MCP server (:mod:`.mcp`) and the
search service beside a Lite server (:mod:`.search`)."""
