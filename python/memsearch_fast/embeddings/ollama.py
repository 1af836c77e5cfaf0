"""Ollama embeddings over its native ``POST /api/embed`` endpoint (batched input).

The server comes from ``base_url``, else ``$OLLAMA_HOST``, else
``http://localhost:11434``; no key is needed unless a proxy asks for one.
"""

from __future__ import annotations

import os
from typing import Any

from memsearch_fast.config import DEFAULT_MODELS
from memsearch_fast.embeddings._http import normalize_base_url, resolve_api_key
from memsearch_fast.embeddings._remote import RemoteEmbedding

DEFAULT_MODEL = DEFAULT_MODELS["ollama"]  # set in memsearch_fast.config
DEFAULT_BASE_URL = "http://localhost:11434"


class OllamaEmbedding(RemoteEmbedding):
    """``/api/embed`` client; Ollama truncates over-long inputs itself (``truncate: true``)."""

    kind = "Ollama server"
    default_batch_size = 64

    def __init__(
        self,
        model: str | None = None,
        *,
        batch_size: int = 0,
        base_url: str | None = None,
        api_key: str | None = None,
        workers: int | None = None,
        dimensions: int | None = None,  # the model's vector size, if known (skips the probe)
        timeout: float = 120.0,
        max_retries: int = 4,
        retry_base_delay: float = 0.5,
        retry_max_delay: float = 30.0,
        max_tokens_per_request: int = 200_000,
        max_input_chars: int = 100_000,
    ) -> None:
        base = normalize_base_url(base_url or os.environ.get("OLLAMA_HOST") or DEFAULT_BASE_URL)
        if base.endswith("/api"):
            base = base[: -len("/api")]
        super().__init__(
            model=model or DEFAULT_MODEL,
            url=f"{base}/api/embed",
            secret=resolve_api_key(api_key, None),
            batch_size=batch_size,
            workers=workers,
            dimension=dimensions,
            timeout=timeout,
            max_retries=max_retries,
            retry_base_delay=retry_base_delay,
            retry_max_delay=retry_max_delay,
            max_tokens_per_request=max_tokens_per_request,
            max_input_chars=max_input_chars,
        )

    def _payload(self, texts: list[str], query: bool) -> dict[str, Any]:
        return {"model": self._model, "input": texts, "truncate": True}

    def _parse(self, data: Any, n: int) -> list[list[float]]:
        vectors = data["embeddings"]
        if not isinstance(vectors, list):
            raise ValueError("embeddings is not a list")
        return vectors
