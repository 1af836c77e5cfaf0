"""Jina AI embeddings over ``POST {base_url}/embeddings``.

The key comes from ``JINA_API_KEY`` unless given (``env:VAR`` reads another
variable) and travels only in the Authorization header. For the models with
task adapters (v3, v4) chunks are sent with ``task: "retrieval.passage"`` and
search queries with ``"retrieval.query"`` (memsearch 0.4.23 sends the passage
task for both); ``task="code"`` picks ``code.passage``/``code.query``,
``task=None`` sends none and another name (``"text-matching"``) is sent as
is. Over-long inputs are truncated by the server (``truncate``).
``dimensions=N`` is passed through (Matryoshka models).
"""

from __future__ import annotations

from typing import Any

from memsearch_fast.config import DEFAULT_MODELS
from memsearch_fast.embeddings._http import normalize_base_url, resolve_api_key
from memsearch_fast.embeddings._remote import RemoteEmbedding, check_dimensions, parse_indexed, require_key

DEFAULT_MODEL = DEFAULT_MODELS["jina"]  # set in memsearch_fast.config
DEFAULT_BASE_URL = "https://api.jina.ai/v1"
KEY_ENV = "JINA_API_KEY"
MAX_BATCH = 2048
KNOWN_DIMENSIONS = {
    "jina-embeddings-v4": 2048,
    "jina-embeddings-v3": 1024,
    "jina-embeddings-v2-base-en": 768,
    "jina-embeddings-v2-base-code": 768,
    "jina-embeddings-v2-base-de": 768,
    "jina-embeddings-v2-base-es": 768,
    "jina-embeddings-v2-base-zh": 768,
}
_NO_TASKS = ("jina-embeddings-v2", "jina-clip-v1")  # models without task adapters
_PAIRED_TASKS = ("retrieval", "code")  # task families with a .query and a .passage adapter


class JinaEmbedding(RemoteEmbedding):
    """``/v1/embeddings`` client; 128 inputs per request by default (as memsearch 0.4.23)."""

    kind = "Jina AI"
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
        task: str | None = "retrieval",
        timeout: float = 60.0,
        max_retries: int = 6,
        retry_base_delay: float = 0.5,
        retry_max_delay: float = 60.0,
        max_tokens_per_request: int = 64_000,
        max_input_chars: int = 100_000,
    ) -> None:
        name = model or DEFAULT_MODEL
        self._dimensions = check_dimensions(dimensions)
        if task is not None and (not isinstance(task, str) or not task.strip()):
            raise ValueError(f"task must be 'retrieval', 'code', another Jina task name or None; got {task!r}")
        self._task = None if task is None or name.startswith(_NO_TASKS) else task.strip()
        base = normalize_base_url(base_url or DEFAULT_BASE_URL, "https")
        super().__init__(
            model=name,
            url=f"{base}/embeddings",
            secret=require_key(resolve_api_key(api_key, KEY_ENV), "jina", KEY_ENV, base_url),
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
        payload: dict[str, Any] = {"model": self._model, "input": texts, "truncate": True}
        if self._task in _PAIRED_TASKS:
            payload["task"] = f"{self._task}.query" if query else f"{self._task}.passage"
        elif self._task is not None:  # a full task name ("text-matching") for both sides
            payload["task"] = self._task
        if self._dimensions is not None:
            payload["dimensions"] = self._dimensions
        return payload

    def _parse(self, data: Any, n: int) -> list[list[float]]:
        return parse_indexed(data, n)
