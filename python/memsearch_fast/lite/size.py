"""When a Milvus Lite database outgrows what Lite serves well.

Milvus Lite holds the whole database in its engine's memory (its RSS follows
the file within a few percent), and its writes slow as the file grows: about
1,000 span rows a second from 1.5 GB, and 180-350 a second past 5.2 GB on two
cores (docs/scale.md, "Toward 1 GB on Milvus Lite"), and its engine loads the
file for minutes before it answers (307 s for 5.5 GB). From
:data:`WARN_BYTES` on, ``index`` and ``status`` say so, with the way on: a
Milvus server.
"""

from __future__ import annotations

import os

#: The size from which a database is said to be too large for Lite (4 GiB: the
#: engine then needs as much memory, and writes have slowed to about 1,000 rows/s).
WARN_BYTES = 4 * 1024**3
#: The same in GB (decimals allowed); 0 says nothing.
ENV = "MEMSEARCH_LITE_WARN_GB"


def warn_bytes() -> int:
    from memsearch_fast.config import environment

    return int(environment.number(ENV, WARN_BYTES / 1e9) * 1e9)  # below 0: 0 (none)


def too_large(db_path: str) -> str:
    """One line when the database at *db_path* has passed :func:`warn_bytes`, else ""."""
    limit = warn_bytes()
    try:
        size = os.stat(db_path).st_size
    except OSError:
        return ""
    if not limit or size < limit:
        return ""
    return (
        f"note: {db_path} holds {size / 1e9:.1f} GB; Milvus Lite keeps all of it in memory, loads it for minutes "
        "after a restart and writes slowly at this size: move the index to a Milvus server (docs/scale.md), e.g. "
        "memsearch index PATH --milvus-uri http://HOST:19530"
    )
