"""OpenAI embeddings and OpenAI-compatible servers (vLLM, LM Studio, TEI, LiteLLM...).

Speaks ``POST {base_url}/embeddings`` directly, so the ``openai`` SDK is not
needed. The API key comes from ``OPENAI_API_KEY`` unless given (``env:VAR``
reads another variable); it is sent only in the Authorization header.
"""

from __future__ import annotations

import os
from typing import Any

from memsearch_fast.config import DEFAULT_MODELS
from memsearch_fast.embeddings._http import normalize_base_url, resolve_api_key
from memsearch_fast.embeddings._remote import RemoteEmbedding, check_dimensions, parse_indexed

DEFAULT_MODEL = DEFAULT_MODELS["openai"]  # set in memsearch_fast.config
DEFAULT_BASE_URL = "https://api.openai.com/v1"
KNOWN_DIMENSIONS = {
    "text-embedding-3-small": 1536,
    "text-embedding-3-large": 3072,
    "text-embedding-ada-002": 1536,
}


class OpenAIEmbedding(RemoteEmbedding):
    """``/v1/embeddings`` client. Limits default to OpenAI's (2,048 inputs, 300k tokens per request)."""

    kind = "OpenAI-compatible server"
    default_batch_size = 2048
    key_env = "OPENAI_API_KEY"

    def __init__(
        self,
        model: str | None = None,
        *,
        batch_size: int = 0,
        base_url: str | None = None,
        api_key: str | None = None,
        workers: int | None = None,
        dimensions: int | None = None,
        timeout: float = 60.0,
        max_retries: int = 6,
        retry_base_delay: float = 0.5,
        retry_max_delay: float = 60.0,
        max_tokens_per_request: int = 200_000,
        max_input_chars: int = 24_000,
    ) -> None:
        check_dimensions(dimensions)
        name = model or DEFAULT_MODEL
        base = normalize_base_url(base_url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL, "https")
        self._dimensions = dimensions
        super().__init__(
            model=name,
            url=f"{base}/embeddings",
            secret=resolve_api_key(api_key, "OPENAI_API_KEY"),
            batch_size=min(batch_size, 2048) if batch_size > 0 else 0,
            workers=workers,
            dimension=dimensions or KNOWN_DIMENSIONS.get(name),
            timeout=timeout,
            max_retries=max_retries,
            retry_base_delay=retry_base_delay,
            retry_max_delay=retry_max_delay,
            max_tokens_per_request=max_tokens_per_request,
            max_input_chars=max_input_chars,
        )

    def _payload(self, texts: list[str], query: bool) -> dict[str, Any]:
        payload: dict[str, Any] = {"model": self._model, "input": texts, "encoding_format": "float"}
        if self._dimensions is not None:
            payload["dimensions"] = self._dimensions
        return payload

    def _parse(self, data: Any, n: int) -> list[list[float]]:
        return parse_indexed(data, n)
