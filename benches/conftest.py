"""Benchmark fixtures: generated corpora are built once per session."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.helpers.corpus import write_corpus

CORPUS_MB = int(os.environ.get("MEMSEARCH_BENCH_MB", "24"))


@pytest.fixture(scope="session")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[Path], int]:
    """A ≥ 20 MB mixed daily-log/docs corpus with CJK; (files, total bytes)."""
    root = tmp_path_factory.mktemp("corpus")
    total = write_corpus(root, total_bytes=CORPUS_MB * 1_000_000, seed=1)
    files = sorted(root.rglob("*.md"))
    return files, total
