"""Ollama embeddings over its native ``POST /api/embed`` endpoint (batched input).

The server comes from ``base_url``, else ``$OLLAMA_HOST``, else
``http://localhost:11434``; no key is needed unless a proxy asks for one.
"""

from __future__ import annotations

from typing import Any

from memsearch_fast.config.schema import DEFAULT_MODELS
from memsearch_fast.embeddings._remote import HostedEmbedding

DEFAULT_MODEL = DEFAULT_MODELS["ollama"]  # set in memsearch_fast.config
DEFAULT_BASE_URL = "http://localhost:11434"


class OllamaEmbedding(HostedEmbedding):
    """``/api/embed`` client; Ollama truncates over-long inputs itself (``truncate: true``).

    ``dimensions`` is the model's vector size, if known (skips the probe); it is not sent.
    """

    kind = "Ollama server"
    provider = "ollama"
    default_model = DEFAULT_MODEL
    default_base_url = DEFAULT_BASE_URL
    base_url_env = "OLLAMA_HOST"
    url_scheme = "http"
    endpoint = "/api/embed"
    key_required = False
    default_batch_size = 64
    dimensions_field = None
    payload_options = (("truncate", True),)
    default_timeout = 120.0
    default_max_retries = 4
    default_retry_max_delay = 30.0

    def _check_dimensions(self, dimensions: int | None) -> int | None:
        return dimensions  # passed on as the known size, unchecked

    def _url_for(self, base: str, name: str) -> str:
        return super()._url_for(base.removesuffix("/api"), name)

    def _parse(self, data: Any, n: int) -> list[list[float]]:
        vectors = data["embeddings"]
        if not isinstance(vectors, list):
            raise ValueError("embeddings is not a list")
        return vectors
