"""SessionStart's status line: the embedding model as a user reads it, and the broken
part that turns memory off (a missing API key, a database the installed Milvus Lite
refuses, a Milvus server that does not answer)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from memsearch_fast.agents.project import is_absolute

if TYPE_CHECKING:
    from memsearch_fast.config.settings import Embedding

#: Environment variables that hold the embedding provider's key when the config has none.
API_KEY_VARS = {
    "openai": "OPENAI_API_KEY",
    "google": "GOOGLE_API_KEY",
    "voyage": "VOYAGE_API_KEY",
    "jina": "JINA_API_KEY",
    "mistral": "MISTRAL_API_KEY",
}


def embedding(emb: Embedding) -> str:
    """``provider/model`` for a model name; ``provider (path)`` for a model directory."""
    from memsearch_fast.config.schema import DEFAULT_MODELS

    model = emb.model or DEFAULT_MODELS.get(emb.provider, "default")
    if is_absolute(model) or model.startswith(("~", ".")):
        return f"{emb.provider} ({model})"
    return f"{emb.provider}/{model}"


def key_problem(emb: Embedding) -> str:
    var = API_KEY_VARS.get(emb.provider)
    if var and not os.environ.get(var) and not emb.api_key:
        return f"{var} not set — memory search disabled (local model: memsearch config set embedding.provider onnx)"
    return ""


def milvus_problem(uri: str) -> str:
    """A local database the installed Milvus Lite refuses, or a remote Milvus
    that does not accept a connection within 0.3 s."""
    import socket
    from urllib.parse import urlsplit

    from memsearch_fast.store.compat import is_local_uri

    if uri.startswith("unix:"):
        return ""
    if is_local_uri(uri):
        return _lite_problem(uri)
    parts = urlsplit(uri)
    port = parts.port or (443 if parts.scheme == "https" else 19530)
    try:
        socket.create_connection((parts.hostname or "localhost", port), timeout=0.3).close()
    except OSError:
        return f"Milvus at {parts.hostname}:{port} is unreachable — memory search disabled"
    return ""


def _lite_problem(uri: str) -> str:
    """A local database the installed Milvus Lite refuses (a watcher would only fail on it)."""
    from memsearch_fast.errors import StoreError
    from memsearch_fast.lite.sidecars import check_layout

    try:
        check_layout(os.path.abspath(os.path.expanduser(uri)))
    except StoreError as exc:
        return f"{exc} — memory search disabled"
    return ""
