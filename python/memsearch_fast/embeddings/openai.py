"""OpenAI embeddings and OpenAI-compatible servers (vLLM, LM Studio, TEI, LiteLLM...).

Speaks ``POST {base_url}/embeddings`` directly, so the ``openai`` SDK is not
needed. The API key comes from ``OPENAI_API_KEY`` unless given (``env:VAR``
reads another variable); it is sent only in the Authorization header.
"""

from __future__ import annotations

from memsearch_fast.config.schema import DEFAULT_MODELS
from memsearch_fast.embeddings._remote import HostedEmbedding

DEFAULT_MODEL = DEFAULT_MODELS["openai"]  # set in memsearch_fast.config
DEFAULT_BASE_URL = "https://api.openai.com/v1"
KNOWN_DIMENSIONS = {
    "text-embedding-3-small": 1536,
    "text-embedding-3-large": 3072,
    "text-embedding-ada-002": 1536,
}


class OpenAIEmbedding(HostedEmbedding):
    """``/v1/embeddings`` client. Limits default to OpenAI's (2,048 inputs, 300k tokens per request)."""

    kind = "OpenAI-compatible server"
    provider = "openai"
    default_model = DEFAULT_MODEL
    default_base_url = DEFAULT_BASE_URL
    base_url_env = "OPENAI_BASE_URL"
    key_env = "OPENAI_API_KEY"
    # api.openai.com needs a key; a server of one's own (--base-url, OPENAI_BASE_URL) may take none.
    key_required = True
    known_dimensions = KNOWN_DIMENSIONS
    max_batch = 2048
    default_batch_size = 2048
    base64_vectors = True  # OpenAI, vLLM, TEI, Infinity: a server that refuses it gets floats
    default_max_input_chars = 24_000
