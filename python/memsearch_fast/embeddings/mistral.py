"""Mistral AI embeddings over ``POST {base_url}/embeddings`` (no ``mistralai`` SDK).

The key comes from ``MISTRAL_API_KEY`` unless given (``env:VAR`` reads another
variable) and travels only in the Authorization header. Mistral has no
query/document input type. ``dimensions=N`` becomes ``output_dimension``
(``codestral-embed`` supports it).
"""

from __future__ import annotations

from memsearch_fast.config.schema import DEFAULT_MODELS
from memsearch_fast.embeddings._remote import HostedEmbedding

DEFAULT_MODEL = DEFAULT_MODELS["mistral"]  # set in memsearch_fast.config
DEFAULT_BASE_URL = "https://api.mistral.ai/v1"
KEY_ENV = "MISTRAL_API_KEY"
KNOWN_DIMENSIONS = {
    "mistral-embed": 1024,
    "codestral-embed": 1536,
    "codestral-embed-2505": 1536,
}


class MistralEmbedding(HostedEmbedding):
    """``/v1/embeddings`` client. Mistral refuses a request over 16,384 tokens in
    all, so requests hold at most 64 inputs (as memsearch 0.4.23) and ~8k
    approximate tokens (characters / 4 undercounts code and non-Latin text);
    one input is cut at 16,000 characters (the model reads 8k tokens)."""

    kind = "Mistral AI"
    provider = "mistral"
    default_model = DEFAULT_MODEL
    default_base_url = DEFAULT_BASE_URL
    key_env = KEY_ENV
    known_dimensions = KNOWN_DIMENSIONS
    default_batch_size = 64
    dimensions_field = "output_dimension"
    payload_options = (("encoding_format", "float"),)
    default_max_tokens = 8_000
    default_max_input_chars = 16_000
