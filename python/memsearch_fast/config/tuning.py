"""Defaults that tune behaviour but are not configuration keys, shared by several floors."""

import os

#: Results of a search (the CLI, the MCP tool, the search service), as memsearch 0.4.23.
DEFAULT_TOP_K = 5
#: Results of ``MemSearch.search`` and ``MilvusStore.search`` (the reference API's default).
API_TOP_K = 10

#: Words that switch a boolean on or off, in a config value or an environment switch.
TRUE_WORDS = ("1", "true", "yes", "on")
FALSE_WORDS = ("0", "false", "no", "off")


def env_off(name: str) -> bool:
    """Whether the environment switch *name* is set to one of :data:`FALSE_WORDS`
    (a switch that is on unless turned off: unset or anything else leaves it on)."""
    return os.environ.get(name, "").strip().lower() in FALSE_WORDS


def env_on(name: str) -> bool:
    """Whether the environment switch *name* is set to one of :data:`TRUE_WORDS`
    (a switch that is off unless turned on)."""
    return os.environ.get(name, "").strip().lower() in TRUE_WORDS
