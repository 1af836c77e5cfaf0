"""The ``memsearch`` command line: one module per command group.

Importing this package registers every command on :data:`app`; nothing
outside the CLI imports it.
"""

from memsearch_fast.cli import indexing, recall, admin, config, model, agent, mcp, hook  # noqa: F401, I001 - registers commands in help order
from memsearch_fast.cli.app import app, main

__all__ = ["app", "main"]
