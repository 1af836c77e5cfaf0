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

from memsearch_fast.config.schema import DEFAULT_MODELS
from memsearch_fast.embeddings._remote import HostedEmbedding

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


class JinaEmbedding(HostedEmbedding):
    """``/v1/embeddings`` client; 128 inputs per request by default (as memsearch 0.4.23).

    ``task`` is described in the module docstring; other keywords are :class:`HostedEmbedding`'s.
    """

    kind = "Jina AI"
    provider = "jina"
    default_model = DEFAULT_MODEL
    default_base_url = DEFAULT_BASE_URL
    key_env = KEY_ENV
    known_dimensions = KNOWN_DIMENSIONS
    max_batch = MAX_BATCH
    default_batch_size = 128
    default_max_tokens = 64_000

    def __init__(self, model: str | None = None, *, task: str | None = "retrieval", **options: Any) -> None:
        self._task = task  # checked by _setup, in the order the other options are
        super().__init__(model, **options)

    def _setup(self, name: str) -> None:
        task = self._task
        if task is not None and (not isinstance(task, str) or not task.strip()):
            raise ValueError(f"task must be 'retrieval', 'code', another Jina task name or None; got {task!r}")
        self._task = None if task is None or name.startswith(_NO_TASKS) else task.strip()

    def _options(self, query: bool) -> dict[str, Any]:
        options: dict[str, Any] = {"truncate": True}
        if self._task in _PAIRED_TASKS:
            options["task"] = f"{self._task}.query" if query else f"{self._task}.passage"
        elif self._task is not None:  # a full task name ("text-matching") for both sides
            options["task"] = self._task
        return options
