"""Voyage AI embeddings over ``POST {base_url}/embeddings`` (no ``voyageai`` SDK).

The key comes from ``VOYAGE_API_KEY`` unless given (``env:VAR`` reads another
variable) and travels only in the Authorization header. Chunks are sent with
``input_type: "document"`` and search queries with ``"query"`` (Voyage
prepends its retrieval prompts; memsearch 0.4.23 sends neither, which Voyage
documents as compatible). ``dimensions=N`` becomes ``output_dimension`` for
the models that support it.
"""

from __future__ import annotations

from typing import Any

from memsearch_fast.config import DEFAULT_MODELS
from memsearch_fast.embeddings._http import normalize_base_url, resolve_api_key
from memsearch_fast.embeddings._remote import RemoteEmbedding, check_dimensions, parse_indexed, require_key

DEFAULT_MODEL = DEFAULT_MODELS["voyage"]  # set in memsearch_fast.config
DEFAULT_BASE_URL = "https://api.voyageai.com/v1"
KEY_ENV = "VOYAGE_API_KEY"
MAX_BATCH = 1000  # inputs per request, the API's limit
KNOWN_DIMENSIONS = {
    "voyage-4-large": 1024,
    "voyage-4": 1024,
    "voyage-4-lite": 1024,
    "voyage-3-large": 1024,
    "voyage-3.5": 1024,
    "voyage-3.5-lite": 1024,
    "voyage-3": 1024,
    "voyage-3-lite": 512,
    "voyage-code-3": 1024,
}


class VoyageEmbedding(RemoteEmbedding):
    """``/v1/embeddings`` client. Requests hold at most 1,000 inputs (the API's
    limit; 128 by default, as memsearch 0.4.23) and ~60k approximate tokens,
    under the smallest per-request token limit of Voyage's models (120k)."""

    kind = "Voyage AI"
    default_batch_size = 128
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
        max_tokens_per_request: int = 60_000,
        max_input_chars: int = 100_000,
    ) -> None:
        name = model or DEFAULT_MODEL
        self._dimensions = check_dimensions(dimensions)
        base = normalize_base_url(base_url or DEFAULT_BASE_URL, "https")
        super().__init__(
            model=name,
            url=f"{base}/embeddings",
            secret=require_key(resolve_api_key(api_key, KEY_ENV), "voyage", KEY_ENV, base_url),
            batch_size=min(batch_size, MAX_BATCH),
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
        payload: dict[str, Any] = {
            "model": self._model,
            "input": texts,
            "input_type": "query" if query else "document",
            "truncation": True,
        }
        if self._dimensions is not None:
            payload["output_dimension"] = self._dimensions
        return payload

    def _parse(self, data: Any, n: int) -> list[list[float]]:
        return parse_indexed(data, n)
