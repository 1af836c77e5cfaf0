"""Defaults that tune behaviour but are not configuration keys, shared by several floors."""

#: Results of a search (the CLI, the MCP tool, the search service), as memsearch 0.4.23.
DEFAULT_TOP_K = 5
#: Results of ``MemSearch.search`` and ``MilvusStore.search`` (the reference API's default).
API_TOP_K = 10

#: Words that switch a boolean on or off, in a config value or an environment switch
#: (:mod:`memsearch_fast.config.environment` reads the switches).
TRUE_WORDS = ("1", "true", "yes", "on")
FALSE_WORDS = ("0", "false", "no", "off")
