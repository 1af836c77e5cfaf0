"""Local embeddings through sentence-transformers (torch), when it is installed.

It is not a dependency: without it, building the provider fails with one line
naming what to install. The default ``onnx`` provider runs the same default
model (all-MiniLM-L6-v2) without torch; this one is for models the ONNX
converter does not handle, and for GPUs (CUDA, then Apple MPS, else CPU).
Remote code in a model repository runs only with ``trust_remote_code=True``.
"""

from __future__ import annotations

import asyncio
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from memsearch_fast.config.schema import DEFAULT_MODELS
from memsearch_fast.embeddings._remote import check_texts
from memsearch_fast.embeddings.models import is_offline
from memsearch_fast.errors import EmbeddingError, one_line
from memsearch_fast.parallelism import Parallelism

DEFAULT_MODEL = DEFAULT_MODELS["local"]  # set in memsearch_fast.config
DEFAULT_BATCH_SIZE = 512  # as memsearch 0.4.23
INSTALL_HINT = "pip install sentence-transformers"


def load_sentence_transformers() -> Any:
    """The ``SentenceTransformer`` class, or a one-line error naming what to install."""
    try:
        from sentence_transformers import (  # type: ignore[import-not-found, unused-ignore]  # optional dependency
            SentenceTransformer,
        )
    except ImportError as exc:
        missing = getattr(exc, "name", None)
        cause = "" if missing in (None, "sentence_transformers") else f" ({one_line(exc)})"
        raise EmbeddingError(
            f"the local embedding provider needs sentence-transformers{cause}: {INSTALL_HINT} "
            "(or use the default onnx provider, which runs all-MiniLM-L6-v2 without torch)"
        ) from None
    return SentenceTransformer


def detect_device() -> str:
    """CUDA, then Apple MPS, else CPU."""
    try:
        import torch  # type: ignore[import-not-found, unused-ignore]  # comes with sentence-transformers
    except ImportError:
        return "cpu"
    if torch.cuda.is_available():
        return "cuda"
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return "mps"
    return "cpu"


class LocalEmbedding:
    """A ``SentenceTransformer`` model; one worker encodes at a time (the model
    parallelises inside). ``base_url``/``api_key`` are accepted and ignored."""

    def __init__(
        self,
        model: str | os.PathLike[str] | None = None,
        *,
        batch_size: int = 0,
        base_url: str | None = None,
        api_key: str | None = None,
        workers: int | None = None,
        parallelism: Parallelism | None = None,
        device: str | None = None,
        trust_remote_code: bool = False,
        offline: bool | None = None,
    ) -> None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 0:
            raise ValueError(f"batch_size must be an integer >= 0, got {batch_size!r}")
        sentence_transformer = load_sentence_transformers()
        self._model_name = os.fspath(model) if model is not None else DEFAULT_MODEL
        self._device = device or detect_device()
        kwargs: dict[str, Any] = {"device": self._device, "trust_remote_code": trust_remote_code}
        if is_offline(offline):
            kwargs["local_files_only"] = True
        try:
            self._st = sentence_transformer(self._model_name, **kwargs)
        except Exception as exc:  # noqa: BLE001 - torch, hub and model errors of every kind
            detail = one_line(exc) or type(exc).__name__
            raise EmbeddingError(f"cannot load sentence-transformers model {self._model_name!r}: {detail}") from None
        dimension = self._st.get_sentence_embedding_dimension()
        if not dimension:
            raise EmbeddingError(f"sentence-transformers model {self._model_name!r} does not say its dimension")
        self._dimension = int(dimension)
        self._batch_size = batch_size if batch_size > 0 else DEFAULT_BATCH_SIZE
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="memsearch-local")
        self._closed = False

    @property
    def model_name(self) -> str:
        return self._model_name

    @property
    def dimension(self) -> int:
        return self._dimension

    @property
    def batch_size(self) -> int:
        return self._batch_size

    @property
    def workers(self) -> int:
        return 1

    @property
    def device(self) -> str:
        return self._device

    @property
    def tokenizer_name(self) -> str:
        name = os.path.basename(self._model_name.rstrip(os.sep)) or "local"
        return f"{name} tokenizer"

    def __repr__(self) -> str:
        return f"LocalEmbedding(model={self._model_name!r}, device={self._device!r}, batch_size={self._batch_size})"

    async def embed(self, texts: list[str]) -> list[list[float]]:
        check_texts(texts)
        if not texts:
            return []
        if self._closed:
            raise EmbeddingError("the local embedding provider is closed")
        return await asyncio.get_running_loop().run_in_executor(self._pool, self._encode, list(texts))

    async def embed_query(self, text: str) -> list[float]:
        return (await self.embed([text]))[0]

    def count_tokens(self, text: str) -> int:
        """Tokens of *text* under the model's own tokenizer (characters / 4 if it has none)."""
        tokenizer = getattr(self._st, "tokenizer", None)
        if tokenizer is None:
            return (len(text) + 3) // 4
        return len(tokenizer.encode(text, add_special_tokens=False, verbose=False))

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._pool.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> LocalEmbedding:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> LocalEmbedding:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()

    def _encode(self, texts: list[str]) -> list[list[float]]:
        prepared = [t if t.strip() else " " for t in texts]
        vectors = self._st.encode(
            prepared,
            batch_size=self._batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        result: list[list[float]] = vectors.tolist()
        return result
