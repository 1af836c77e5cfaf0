"""Shared fixtures: locations of the shared model and the bundled sample."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SAMPLE_DIR = ROOT / "examples" / "sample"


def shared_model_dir() -> Path:
    """The shared ONNX model; MEMSEARCH_TEST_MODEL_DIR overrides it."""
    override = os.environ.get("MEMSEARCH_TEST_MODEL_DIR")
    if override:
        return Path(override)
    return ROOT.parent / "shared" / "models" / "all-MiniLM-L6-v2-onnx"


@pytest.fixture(scope="session")
def model_dir() -> Path:
    path = shared_model_dir()
    if not (path / "tokenizer.json").is_file():
        pytest.fail(f"shared model not found at {path}; set MEMSEARCH_TEST_MODEL_DIR")
    return path


@pytest.fixture(scope="session")
def sample_dir() -> Path:
    return SAMPLE_DIR
