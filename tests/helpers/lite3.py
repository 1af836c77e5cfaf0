"""A Milvus Lite 3.x database directory, as memsearch 0.4.23 leaves at ~/.memsearch/milvus.db.

With ``MEMSEARCH_TEST_LITE3_PYTHON`` naming a Python that has milvus-lite 3.x
and pymilvus (``python3 -m venv /tmp/ml3 && /tmp/ml3/bin/pip install
'milvus-lite>=3' pymilvus``), the engine itself writes it; without, the
layout that engine writes (milvus-lite 3.2.2) is built by hand.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

_MAKE = """
import sys
from pymilvus import MilvusClient
c = MilvusClient(sys.argv[1])
c.create_collection("memsearch_chunks", dimension=4)
c.insert("memsearch_chunks", [{"id": 1, "vector": [0.1, 0.2, 0.3, 0.4]}])
c.close()
"""


def make_lite3_database(path: Path) -> bool:
    """Create the database at *path*; True when milvus-lite 3.x wrote it."""
    python = os.environ.get("MEMSEARCH_TEST_LITE3_PYTHON", "")
    path.parent.mkdir(parents=True, exist_ok=True)
    if python:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        subprocess.run([python, "-c", _MAKE, str(path)], env=env, check=True, timeout=120, capture_output=True)
        return True
    coll = path / "collections" / "memsearch_chunks"
    for d in (path / ".database-staging", path / "databases", coll / "wal", coll / "partitions" / "_default" / "data"):
        d.mkdir(parents=True)
    (path / "LOCK").write_bytes(b"")
    (coll / "schema.json").write_text('{"name": "memsearch_chunks"}', encoding="utf-8")
    (coll / "manifest.json").write_text("{}", encoding="utf-8")
    return False


def snapshot(path: Path) -> dict[str, tuple[int, int, str]]:
    """Every entry under *path*: size, mtime and content hash (files)."""
    out: dict[str, tuple[int, int, str]] = {}
    for p in sorted(path.rglob("*")):
        st = p.lstat()
        digest = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else ""
        out[str(p.relative_to(path))] = (st.st_size if p.is_file() else 0, st.st_mtime_ns, digest)
    return out
