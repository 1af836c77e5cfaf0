"""Embedding providers: turn chunk texts into L2-normalised vectors.

``get_provider`` is the single entry point the index pipeline uses. Provider
modules (and onnxruntime, tokenizers, numpy, HTTP clients) are imported only
when a provider is built, so importing this package stays cheap for CLI start-up
and agent hooks.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from memsearch_fast.config.schema import DEFAULT_PROVIDER
from memsearch_fast.errors import (
    EmbeddingAPIError,
    EmbeddingError,
    ModelConversionError,
    ModelNotFoundError,
    UnknownProviderError,
)

if TYPE_CHECKING:
    from memsearch_fast.parallelism import Parallelism

__all__ = [
    "DEFAULT_PROVIDER",
    "IN_PROCESS",
    "PROVIDERS",
    "EmbeddingAPIError",
    "EmbeddingError",
    "EmbeddingProvider",
    "ModelConversionError",
    "ModelNotFoundError",
    "UnknownProviderError",
    "get_provider",
]

# name -> (module, class); resolved lazily by get_provider.
PROVIDERS: dict[str, tuple[str, str]] = {
    "onnx": ("memsearch_fast.embeddings.onnx", "OnnxEmbedding"),
    "openai": ("memsearch_fast.embeddings.openai", "OpenAIEmbedding"),
    "ollama": ("memsearch_fast.embeddings.ollama", "OllamaEmbedding"),
    "voyage": ("memsearch_fast.embeddings.voyage", "VoyageEmbedding"),
    "google": ("memsearch_fast.embeddings.google", "GoogleEmbedding"),
    "jina": ("memsearch_fast.embeddings.jina", "JinaEmbedding"),
    "mistral": ("memsearch_fast.embeddings.mistral", "MistralEmbedding"),
    "local": ("memsearch_fast.embeddings.local", "LocalEmbedding"),
}
#: Providers that compute vectors in this process, on threads of their own.
IN_PROCESS = frozenset({"onnx", "local"})


@runtime_checkable
class EmbeddingProvider(Protocol):
    """What the index pipeline needs from an embedding backend.

    ``embed`` returns one L2-normalised vector per input text, in input order:
    a list of Python floats, or a float32 numpy row (the HTTP providers hand
    on the decoded answer so: a list would cost about 20 µs a vector to make
    and as much again to undo); pymilvus takes both. ``embed_query`` returns
    a list. It may be awaited
    concurrently from several tasks; ``workers`` is how many batches it really
    processes at once (inference workers or concurrent requests), so callers
    can size how many ``embed`` calls they keep in flight.

    Every built-in provider also has ``count_tokens(text) -> int`` and
    ``tokenizer_name`` (the model's own tokenizer for onnx and local, characters
    / 4 for the HTTP providers), which ``search --budget`` uses; they are not
    part of the protocol, so a minimal provider need not have them.
    """

    @property
    def model_name(self) -> str: ...

    @property
    def dimension(self) -> int: ...

    @property
    def batch_size(self) -> int: ...

    @property
    def workers(self) -> int: ...

    async def embed(self, texts: list[str]) -> list[list[float]]: ...

    async def embed_query(self, text: str) -> list[float]: ...

    def close(self) -> None: ...


def get_provider(
    name: str = DEFAULT_PROVIDER,
    *,
    model: str | None = None,
    batch_size: int = 0,
    base_url: str | None = None,
    api_key: str | None = None,
    workers: int | None = None,
    parallelism: Parallelism | None = None,
    **options: Any,
) -> EmbeddingProvider:
    """Build the provider called *name* (a key of ``PROVIDERS``: "onnx", "openai",
    "ollama", "voyage", "google", "jina", "mistral" or "local").

    ``model=None`` and ``batch_size=0`` pick the provider's defaults.
    ``workers`` is the number of inference workers (onnx) or concurrent
    requests (HTTP providers), resolved by ``memsearch_fast.parallelism.plan``
    inside the provider. A ``parallelism`` (the run's ``plan(...)``) sizes the
    provider instead: onnx gets its ``inference_workers`` and
    ``intra_op_threads``, HTTP providers its ``remote_requests``; it cannot be
    combined with ``workers`` or, for onnx, ``threads``; local
    (sentence-transformers) runs one worker. ``base_url``/``api_key`` are
    ignored by onnx and local. Extra keyword ``options`` go to the provider
    (for example ``quantized=False`` for onnx, ``dimensions=256`` for the HTTP
    providers, ``task="code"`` for jina). The built provider's ``workers``
    property gives its real concurrency.
    """
    key = (name or "").strip().lower()
    target = PROVIDERS.get(key)
    if target is None:
        known = ", ".join(sorted(PROVIDERS))
        raise UnknownProviderError(f"unknown embedding provider {name!r}; known providers: {known}")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 0:
        raise ValueError(f"batch_size must be an integer >= 0 (0 = provider default), got {batch_size!r}")
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
        raise ValueError(f"workers must be an integer >= 1, got {workers!r}")
    module_name, class_name = target
    cls = getattr(importlib.import_module(module_name), class_name)
    provider: EmbeddingProvider
    if key == "onnx":
        provider = cls(model, batch_size=batch_size, workers=workers, parallelism=parallelism, **options)
    else:
        provider = cls(
            model,
            batch_size=batch_size,
            base_url=base_url,
            api_key=api_key,
            workers=workers,
            parallelism=parallelism,
            **options,
        )
    return provider


#: The providers that call an HTTP API (``HostedEmbedding`` subclasses).
REMOTE = ("openai", "ollama", "voyage", "google", "jina", "mistral")


def check_key(name: str, *, api_key: str | None = None, base_url: str | None = None) -> None:
    """Raise the one-line :class:`EmbeddingError` of a hosted provider whose
    official endpoint has no API key, before anything is built or opened
    (no retries against an endpoint that can only refuse); other providers pass."""
    key = (name or "").strip().lower()
    if key not in REMOTE:
        return
    from memsearch_fast.embeddings._remote import check_key as check_hosted

    module_name, class_name = PROVIDERS[key]
    check_hosted(getattr(importlib.import_module(module_name), class_name), api_key, base_url)
