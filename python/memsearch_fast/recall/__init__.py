"""The read path: search tiers (:mod:`.search`), rerank, expand, get and transcript."""
