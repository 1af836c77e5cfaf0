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

from memsearch_fast.config.schema import DEFAULT_MODELS
from memsearch_fast.embeddings._remote import HostedEmbedding

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


class VoyageEmbedding(HostedEmbedding):
    """``/v1/embeddings`` client. Requests hold at most 1,000 inputs (the API's
    limit; 128 by default, as memsearch 0.4.23) and ~60k approximate tokens,
    under the smallest per-request token limit of Voyage's models (120k)."""

    kind = "Voyage AI"
    provider = "voyage"
    default_model = DEFAULT_MODEL
    default_base_url = DEFAULT_BASE_URL
    key_env = KEY_ENV
    known_dimensions = KNOWN_DIMENSIONS
    max_batch = MAX_BATCH
    default_batch_size = 128
    dimensions_field = "output_dimension"
    default_max_tokens = 60_000

    def _options(self, query: bool) -> dict[str, Any]:
        return {"input_type": "query" if query else "document", "truncation": True}
