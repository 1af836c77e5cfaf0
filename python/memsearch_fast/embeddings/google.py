"""Google Gemini embeddings over ``POST {base_url}/models/{model}:batchEmbedContents``
(no ``google-genai`` SDK).

The key comes from ``GOOGLE_API_KEY`` unless given (``env:VAR`` reads another
variable) and travels only in the ``x-goog-api-key`` header, never in the URL.
Chunks are sent with ``taskType: RETRIEVAL_DOCUMENT`` and search queries with
``RETRIEVAL_QUERY`` (memsearch 0.4.23 sends no task type). The known models
are asked for 768 dimensions (``outputDimensionality``), as memsearch 0.4.23
does, so a collection built by either tool has the same width; ``dimensions=N``
asks for another size, and an unknown model is probed for its native one.
"""

from __future__ import annotations

import re
from typing import Any

from memsearch_fast.config import DEFAULT_MODELS
from memsearch_fast.embeddings._http import normalize_base_url, resolve_api_key
from memsearch_fast.embeddings._remote import RemoteEmbedding, check_dimensions, require_key

DEFAULT_MODEL = DEFAULT_MODELS["google"]  # set in memsearch_fast.config
DEFAULT_BASE_URL = "https://generativelanguage.googleapis.com/v1beta"
KEY_ENV = "GOOGLE_API_KEY"
MAX_BATCH = 100  # requests per batchEmbedContents call, the API's limit
KNOWN_DIMENSIONS = {
    "gemini-embedding-001": 768,
    "gemini-embedding-2-preview": 768,
    "text-embedding-005": 768,
    "text-embedding-004": 768,
}


class GoogleEmbedding(RemoteEmbedding):
    """``batchEmbedContents`` client: at most 100 texts per request (the API's
    limit, also the default); one text is cut at 8,000 characters (the models
    read 2,048 tokens)."""

    kind = "Google Gemini API"
    default_batch_size = MAX_BATCH
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
        max_tokens_per_request: int = 200_000,
        max_input_chars: int = 8_000,
    ) -> None:
        name = (model or DEFAULT_MODEL).strip().removeprefix("models/")
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name):
            raise ValueError(f"invalid Gemini model name {model!r}")
        self._output_dims = check_dimensions(dimensions) or KNOWN_DIMENSIONS.get(name)
        self._resource = f"models/{name}"
        base = normalize_base_url(base_url or DEFAULT_BASE_URL, "https")
        super().__init__(
            model=name,
            url=f"{base}/{self._resource}:batchEmbedContents",
            secret=require_key(resolve_api_key(api_key, KEY_ENV), "google", KEY_ENV, base_url),
            batch_size=min(batch_size, MAX_BATCH),
            workers=workers,
            dimension=self._output_dims,
            timeout=timeout,
            max_retries=max_retries,
            retry_base_delay=retry_base_delay,
            retry_max_delay=retry_max_delay,
            max_tokens_per_request=max_tokens_per_request,
            max_input_chars=max_input_chars,
        )

    def _headers(self) -> dict[str, str]:
        return {"x-goog-api-key": self._secret.reveal()} if self._secret is not None else {}

    def _key_rejected(self, status: int, message: str) -> bool:
        # Google answers a wrong key with HTTP 400 "API key not valid. Please pass a valid API key."
        return status == 400 and "api key" in message.lower()

    def _payload(self, texts: list[str], query: bool) -> dict[str, Any]:
        task = "RETRIEVAL_QUERY" if query else "RETRIEVAL_DOCUMENT"
        extra: dict[str, Any] = {"taskType": task}
        if self._output_dims is not None:
            extra["outputDimensionality"] = self._output_dims
        return {"requests": [{"model": self._resource, "content": {"parts": [{"text": t}]}, **extra} for t in texts]}

    def _parse(self, data: Any, n: int) -> list[list[float]]:
        embeddings = data["embeddings"]
        if not isinstance(embeddings, list):
            raise ValueError("embeddings is not a list")
        return [item["values"] for item in embeddings]
