"""`python -m memsearch_fast` runs the `memsearch` command."""

from memsearch_fast.cli import main

main()
