"""A ``watch.lease`` request to the database's service, as the hooks and the CLI make it."""

from __future__ import annotations

import os
from pathlib import Path

from memsearch_fast.serve.protocol import WatchLease


def lease(model_dir: Path, root: Path, holder: str, pid: int | None, collection: str = "notes") -> WatchLease:
    return {  # the model named as a hook or the CLI names it (serve.client.model_of)
        "op": "watch.lease",
        "collection": collection,
        "roots": [str(root)],
        "model_dir": str(model_dir.resolve()),
        "model_name": os.path.abspath(model_dir),
        "max_chunk_size": 1500,
        "overlap_lines": 2,
        "ignore_files": [],
        "exclude": [],
        "debounce_ms": 200,
        "holder": holder,
        "pid": pid,
    }
