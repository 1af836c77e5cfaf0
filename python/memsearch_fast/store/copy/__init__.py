"""The in-memory copy a long-lived process searches (:mod:`memsearch_fast.store.copy.dense_index`): its rows
(:mod:`.rows`), its span codes (:mod:`.spans`) and the copy saved beside a local
database (:mod:`.saved`)."""
