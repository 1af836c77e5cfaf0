from memsearch_fast.cli import main

main()
