"""Mistral AI embeddings over ``POST {base_url}/embeddings`` (no ``mistralai`` SDK).

The key comes from ``MISTRAL_API_KEY`` unless given (``env:VAR`` reads another
variable) and travels only in the Authorization header. Mistral has no
query/document input type. ``dimensions=N`` becomes ``output_dimension``
(``codestral-embed`` supports it).
"""

from __future__ import annotations

from typing import Any

from memsearch_fast.config import DEFAULT_MODELS
from memsearch_fast.embeddings._http import normalize_base_url, resolve_api_key
from memsearch_fast.embeddings._remote import RemoteEmbedding, check_dimensions, parse_indexed, require_key

DEFAULT_MODEL = DEFAULT_MODELS["mistral"]  # set in memsearch_fast.config
DEFAULT_BASE_URL = "https://api.mistral.ai/v1"
KEY_ENV = "MISTRAL_API_KEY"
KNOWN_DIMENSIONS = {
    "mistral-embed": 1024,
    "codestral-embed": 1536,
    "codestral-embed-2505": 1536,
}


class MistralEmbedding(RemoteEmbedding):
    """``/v1/embeddings`` client. Mistral refuses a request over 16,384 tokens in
    all, so requests hold at most 64 inputs (as memsearch 0.4.23) and ~8k
    approximate tokens (characters / 4 undercounts code and non-Latin text);
    one input is cut at 16,000 characters (the model reads 8k tokens)."""

    kind = "Mistral AI"
    default_batch_size = 64
    key_env = KEY_ENV

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
        max_tokens_per_request: int = 8_000,
        max_input_chars: int = 16_000,
    ) -> None:
        name = model or DEFAULT_MODEL
        self._dimensions = check_dimensions(dimensions)
        base = normalize_base_url(base_url or DEFAULT_BASE_URL, "https")
        super().__init__(
            model=name,
            url=f"{base}/embeddings",
            secret=require_key(resolve_api_key(api_key, KEY_ENV), "mistral", KEY_ENV, base_url),
            batch_size=batch_size,
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
            payload["output_dimension"] = self._dimensions
        return payload

    def _parse(self, data: Any, n: int) -> list[list[float]]:
        return parse_indexed(data, n)
