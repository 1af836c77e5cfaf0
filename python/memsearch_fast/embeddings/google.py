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

from memsearch_fast.config.schema import DEFAULT_MODELS
from memsearch_fast.embeddings._remote import HostedEmbedding

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


class GoogleEmbedding(HostedEmbedding):
    """``batchEmbedContents`` client: at most 100 texts per request (the API's
    limit, also the default); one text is cut at 8,000 characters (the models
    read 2,048 tokens)."""

    kind = "Google Gemini API"
    provider = "google"
    default_model = DEFAULT_MODEL
    default_base_url = DEFAULT_BASE_URL
    endpoint = "/models/{model}:batchEmbedContents"
    key_env = KEY_ENV
    known_dimensions = KNOWN_DIMENSIONS
    max_batch = MAX_BATCH
    default_batch_size = MAX_BATCH
    default_max_input_chars = 8_000

    def _model_name(self, model: str | None) -> str:
        name = (model or DEFAULT_MODEL).strip().removeprefix("models/")
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name):
            raise ValueError(f"invalid Gemini model name {model!r}")
        return name

    def _setup(self, name: str) -> None:
        self._output_dims = self._dimensions or KNOWN_DIMENSIONS.get(name)
        self._resource = f"models/{name}"

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
