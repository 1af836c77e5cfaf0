"""Shared body of the server-backed providers (OpenAI-compatible, Ollama,
Voyage, Gemini, Jina, Mistral).

Subclasses only say how to build a request (for documents or for a query) and
read its answer; batching by count and approximate tokens, bounded
concurrency, retries, normalisation and order preservation live here once.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, ClassVar

from memsearch_fast.embeddings._http import (
    JsonClient,
    Secret,
    loads,
    normalize_base_url,
    post_json,
    resolve_api_key,
    safe_url,
)
from memsearch_fast.errors import EmbeddingAPIError, EmbeddingError
from memsearch_fast.parallelism import Parallelism, plan

logger = logging.getLogger(__name__)

#: HTTP statuses with which a server may refuse ``encoding_format: base64``.
BASE64_REFUSED = frozenset({400, 415, 422})

#: How HTTP providers count tokens (their tokenizer is on the server); the
#: same name as ``memsearch_fast.recall.APPROX_TOKENIZER``.
APPROX_TOKENIZER = "chars/4 (approximation)"


class RemoteEmbedding:
    """Base class: subclasses set ``_url`` and implement ``_payload`` and ``_parse``.

    At most ``workers`` requests are in flight at once (unset: ``plan().remote_requests``).
    ``embed`` sends documents and ``embed_query`` a query: ``_payload`` gets
    ``query=True`` for the latter, for APIs with an input type or task.
    """

    kind = "embedding server"
    default_batch_size = 256
    #: The environment variable the key comes from by default (named in errors).
    key_env: str | None = None
    #: Name of the token count that :meth:`count_tokens` gives.
    tokenizer_name = APPROX_TOKENIZER
    #: Ask for base64 vectors (``encoding_format: base64``, OpenAI's shape): 4
    #: bytes a number instead of ~20 of JSON text, and no float parsing, which
    #: otherwise costs the client more CPU than the whole zero-cost pipeline
    #: (docs/scale.md). A server that refuses it gets floats from then on.
    base64_vectors: ClassVar[bool] = False

    def __init__(
        self,
        *,
        model: str,
        url: str,
        secret: Secret | None,
        batch_size: int,
        workers: int | None,
        parallelism: Parallelism | None,
        dimension: int | None,
        timeout: float,
        max_retries: int,
        retry_base_delay: float,
        retry_max_delay: float,
        max_tokens_per_request: int,
        max_input_chars: int,
    ) -> None:
        if max_retries < 0 or max_tokens_per_request < 1 or max_input_chars < 1 or timeout <= 0:
            raise ValueError("max_retries must be >= 0, timeout > 0 and token/char limits >= 1")
        self._model = model
        self._url = url
        self._secret = secret
        self._batch_size = batch_size if batch_size > 0 else self.default_batch_size
        if parallelism is not None and workers is not None:
            raise ValueError("pass either parallelism or workers, not both")
        self._workers = (parallelism or plan(workers)).remote_requests  # plan validates workers
        self._dimension = dimension
        self._max_retries = max_retries
        self._base_delay = retry_base_delay
        self._max_delay = retry_max_delay
        self._max_tokens = max_tokens_per_request
        self._max_chars = max_input_chars
        self._client = JsonClient(timeout)
        self._executor = ThreadPoolExecutor(self._workers, thread_name_prefix=f"memsearch-{self.kind.split()[0]}")
        self._closed = False
        self._base64 = self.base64_vectors

    # subclass hooks -------------------------------------------------------------

    def _payload(self, texts: list[str], query: bool) -> dict[str, Any]:
        raise NotImplementedError

    def _parse(self, data: Any, n: int) -> Any:
        """The *n* vectors of an answer, in input order: a list, or a 2-D array."""
        raise NotImplementedError

    def _headers(self) -> dict[str, str]:
        """Request headers carrying the key (a bearer token unless overridden)."""
        return {"Authorization": f"Bearer {self._secret.reveal()}"} if self._secret is not None else {}

    def _key_rejected(self, status: int, message: str) -> bool:
        """Whether an error answer other than 401/403 means a bad key."""
        return False

    # protocol -------------------------------------------------------------------

    @property
    def model_name(self) -> str:
        return self._model

    @property
    def batch_size(self) -> int:
        return self._batch_size

    @property
    def workers(self) -> int:
        """Requests sent at once (the size of the request pool)."""
        return self._workers

    @property
    def dimension(self) -> int:
        """Known up front for common models; otherwise one blocking probe request."""
        if self._dimension is None:
            with ThreadPoolExecutor(1) as one:
                vecs = one.submit(asyncio.run, self._request(["dimension probe"])).result()
            self._dimension = len(vecs[0])
        return self._dimension

    def __repr__(self) -> str:
        key = "'***'" if self._secret is not None else "None"
        return (
            f"{type(self).__name__}(model={self._model!r}, url={safe_url(self._url)!r}, "
            f"api_key={key}, batch_size={self._batch_size}, workers={self._workers})"
        )

    async def embed(self, texts: list[str]) -> list[list[float]]:
        """Embed *texts* (documents) in requests of at most ``batch_size`` texts and the token budget."""
        return await self._embed(texts, query=False)

    async def embed_query(self, text: str) -> list[float]:
        """Embed a search query (with the API's query input type where it has one)."""
        if not isinstance(text, str):
            raise TypeError(f"embed_query() expects a str, got {type(text).__name__}")
        return [float(x) for x in (await self._embed([text], query=True))[0]]

    def count_tokens(self, text: str) -> int:
        """Approximate tokens of *text*: characters / 4, rounded up (the tokenizer is remote)."""
        return (len(text) + 3) // 4

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._executor.shutdown(wait=True, cancel_futures=True)
        self._client.close()

    def __enter__(self) -> RemoteEmbedding:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> RemoteEmbedding:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()

    # internals ------------------------------------------------------------------

    async def _embed(self, texts: list[str], *, query: bool) -> list[list[float]]:
        check_texts(texts)
        if not texts:
            return []
        if self._closed:
            raise EmbeddingError(f"the {self.kind} provider is closed")
        prepared = [t[: self._max_chars] if t.strip() else " " for t in texts]
        parts = await asyncio.gather(*(self._request(prepared[a:b], query) for a, b in self._split(prepared)))
        return await asyncio.get_running_loop().run_in_executor(None, self._normalize, parts)

    async def _request(self, texts: list[str], query: bool = False, *, floats: bool = False) -> Any:
        """One request's vectors: a list of them, or a float32 array when sent as base64."""
        payload = self._payload(texts, query)
        asked_base64 = self._base64 and not floats
        if self.base64_vectors:
            payload["encoding_format"] = "base64" if asked_base64 else "float"
        try:
            data = await post_json(
                self._client,
                self._executor,
                self._url,
                payload,
                headers=self._headers(),
                secret=self._secret,
                what=self.kind,
                max_retries=self._max_retries,
                base_delay=self._base_delay,
                max_delay=self._max_delay,
                key_env=self.key_env,
                key_rejected=self._key_rejected,
                decode=base64_answer(len(texts)) if asked_base64 else loads,
            )
        except EmbeddingAPIError as exc:
            if not (asked_base64 and exc.status in BASE64_REFUSED):
                raise
            # Floats for this request; only if they are accepted was base64 the problem.
            vectors = await self._request(texts, query, floats=True)
            if self._base64:
                self._base64 = False
                where = safe_url(self._url)
                logger.info("%s at %s refused base64 vectors (%s); asking for floats", self.kind, where, exc)
            return vectors
        if isinstance(data, Vectors):
            return data.rows
        try:
            vectors = self._parse(data, len(texts))
        except (KeyError, TypeError, ValueError, IndexError):
            raise EmbeddingAPIError(f"{self.kind} at {safe_url(self._url)} sent an unexpected answer", 200) from None
        if len(vectors) != len(texts):
            raise EmbeddingAPIError(
                f"{self.kind} at {safe_url(self._url)} returned {len(vectors)} vectors for {len(texts)} texts", 200
            )
        return vectors

    def _split(self, texts: list[str]) -> list[tuple[int, int]]:
        """Contiguous ranges under both the count and the approximate token budget (chars / 4)."""
        ranges: list[tuple[int, int]] = []
        start, tokens = 0, 0
        for i, text in enumerate(texts):
            cost = len(text) // 4 + 1
            if i > start and (i - start >= self._batch_size or tokens + cost > self._max_tokens):
                ranges.append((start, i))
                start, tokens = i, 0
            tokens += cost
        ranges.append((start, len(texts)))
        return ranges

    def _normalize(self, parts: list[Any]) -> list[list[float]]:
        """The requests' vectors (lists, or arrays from base64) as unit vectors: float32 rows of
        one array, never converted to lists (see :class:`..EmbeddingProvider`)."""
        import numpy as np

        try:
            if all(isinstance(p, np.ndarray) for p in parts):
                arr = np.concatenate(parts).astype(np.float32, copy=False)
            else:
                arr = np.asarray([v for part in parts for v in part], dtype=np.float32)
        except ValueError:
            raise EmbeddingAPIError(f"{self.kind} returned vectors of different lengths", 200) from None
        if arr.ndim != 2 or arr.shape[1] == 0:
            raise EmbeddingAPIError(f"{self.kind} returned malformed vectors", 200)
        if self._dimension is not None and arr.shape[1] != self._dimension:
            raise EmbeddingAPIError(
                f"{self.kind} returned {arr.shape[1]}-dimensional vectors, expected {self._dimension}", 200
            )
        norms = np.linalg.norm(arr, axis=1, keepdims=True)
        return list(arr / np.maximum(norms, 1e-12))


class HostedEmbedding(RemoteEmbedding):
    """Base class of the providers of one HTTP API (OpenAI, Voyage, Gemini, Jina,
    Mistral, Ollama): the constructor lives here once, and a subclass declares
    its API in class attributes, overriding ``_options`` (extra payload fields),
    ``_parse`` or ``_headers`` only where its API differs.

    ``_payload`` sends ``{"model", "input", **_options(query)}`` plus the
    requested ``dimensions`` under ``dimensions_field``; ``_parse`` reads the
    OpenAI shape (:func:`parse_indexed`). Limits left as ``None`` take the
    class's ``default_*`` values.
    """

    #: Provider name used in errors ("voyage").
    provider: ClassVar[str] = ""
    default_model: ClassVar[str] = ""
    default_base_url: ClassVar[str] = ""
    #: Environment variable read for the base URL when none is given.
    base_url_env: ClassVar[str | None] = None
    #: Scheme assumed for a base URL given without one.
    url_scheme: ClassVar[str] = "https"
    #: Path after the base URL; ``{model}`` is replaced by the model name.
    endpoint: ClassVar[str] = "/embeddings"
    #: Whether the official endpoint (no ``base_url``, nor one in ``base_url_env``) needs a key up front.
    key_required: ClassVar[bool] = True
    #: Vector size of the known models (skips the probe request).
    known_dimensions: ClassVar[Mapping[str, int]] = {}
    #: Inputs per request, the API's limit (``None``: no cap).
    max_batch: ClassVar[int | None] = None
    #: Payload field carrying ``dimensions`` (``None``: not sent).
    dimensions_field: ClassVar[str | None] = "dimensions"
    #: Fixed extra payload fields, as (name, value) pairs.
    payload_options: ClassVar[tuple[tuple[str, Any], ...]] = ()
    default_timeout: ClassVar[float] = 60.0
    default_max_retries: ClassVar[int] = 6
    default_retry_max_delay: ClassVar[float] = 60.0
    default_max_tokens: ClassVar[int] = 200_000
    default_max_input_chars: ClassVar[int] = 100_000

    def __init__(
        self,
        model: str | None = None,
        *,
        batch_size: int = 0,
        base_url: str | None = None,
        api_key: str | None = None,
        workers: int | None = None,
        parallelism: Parallelism | None = None,
        dimensions: int | None = None,
        timeout: float | None = None,
        max_retries: int | None = None,
        retry_base_delay: float = 0.5,
        retry_max_delay: float | None = None,
        max_tokens_per_request: int | None = None,
        max_input_chars: int | None = None,
    ) -> None:
        name = self._model_name(model)
        self._dimensions = self._check_dimensions(dimensions)
        self._setup(name)
        env_base = os.environ.get(self.base_url_env) if self.base_url_env else None
        base = normalize_base_url(base_url or env_base or self.default_base_url, self.url_scheme)
        secret = resolve_api_key(api_key, self.key_env)
        if self.key_required:
            secret = require_key(secret, self.provider, self.key_env or "", base_url or env_base)
        super().__init__(
            model=name,
            url=self._url_for(base, name),
            secret=secret,
            batch_size=batch_size if self.max_batch is None else min(batch_size, self.max_batch),
            workers=workers,
            parallelism=parallelism,
            dimension=self._dimensions if self._dimensions is not None else self.known_dimensions.get(name),
            timeout=self.default_timeout if timeout is None else timeout,
            max_retries=self.default_max_retries if max_retries is None else max_retries,
            retry_base_delay=retry_base_delay,
            retry_max_delay=self.default_retry_max_delay if retry_max_delay is None else retry_max_delay,
            max_tokens_per_request=self.default_max_tokens
            if max_tokens_per_request is None
            else max_tokens_per_request,
            max_input_chars=self.default_max_input_chars if max_input_chars is None else max_input_chars,
        )

    # construction hooks ---------------------------------------------------------

    def _model_name(self, model: str | None) -> str:
        """The model to use for the *model* argument (``None``: the default)."""
        return model or self.default_model

    def _check_dimensions(self, dimensions: int | None) -> int | None:
        return check_dimensions(dimensions)

    def _setup(self, name: str) -> None:
        """Validate and store provider-specific options (before the URL and key)."""

    def _url_for(self, base: str, name: str) -> str:
        return base + self.endpoint.format(model=name)

    # request hooks --------------------------------------------------------------

    def _options(self, query: bool) -> dict[str, Any]:
        """Payload fields after ``model`` and ``input`` (for documents or a query)."""
        return dict(self.payload_options)

    def _payload(self, texts: list[str], query: bool) -> dict[str, Any]:
        payload: dict[str, Any] = {"model": self._model, "input": texts, **self._options(query)}
        if self._dimensions is not None and self.dimensions_field is not None:
            payload[self.dimensions_field] = self._dimensions
        return payload

    def _parse(self, data: Any, n: int) -> Any:
        return parse_indexed(data, n)


@dataclass(frozen=True, slots=True)
class Vectors:
    """An answer read straight to its vectors (:func:`base64_answer`): a float32 array."""

    rows: Any


def base64_answer(n: int) -> Callable[[bytes], Any]:
    """A reader of an answer of *n* base64 vectors in OpenAI's shape: the Rust core reads
    the body to the vectors' bytes without the GIL, no Python object a vector (about 2 ms
    of an answer of 512, with the GIL, as JSON and then base64); any other answer is read
    as JSON, by the path that says what is wrong with it."""

    def read(body: bytes) -> Any:
        import numpy as np

        from memsearch_fast._core import base64_answer as read_rows

        raw = read_rows(body, n)
        if raw is None:
            return loads(body)
        return Vectors(np.frombuffer(raw, dtype="<f4").reshape(n, -1))

    return read


def decode_base64_rows(rows: list[str]) -> Any:
    """Base64 vectors (little-endian float32, ``encoding_format: base64``) as one
    float32 array of shape (rows, dimension): rows of one length, joined and decoded
    in one call by the Rust core, without the GIL (a 50 MB index decodes 1 GB of it)."""
    import numpy as np

    from memsearch_fast._core import decode_base64_rows as decode

    if len({len(r) for r in rows}) != 1:
        raise ValueError("base64 vectors of different lengths")
    try:
        raw = decode("".join(rows), len(rows[0]))
    except UnicodeEncodeError:
        raise ValueError("bad base64 vector") from None
    if not raw or len(raw) % (4 * len(rows)):
        raise ValueError("bad base64 vector")
    return np.frombuffer(raw, dtype="<f4").reshape(len(rows), -1)


def parse_indexed(data: Any, n: int) -> Any:
    """``{"data": [{"index": i, "embedding": [...]}, ...]}`` (OpenAI's shape, also
    Voyage's, Jina's and Mistral's) in input order; a missing index means list order.
    Base64 embeddings (see ``RemoteEmbedding.base64_vectors``) come back as one array."""
    items = data["data"]
    out: list[Any] = [None] * n
    for pos, item in enumerate(items):
        index = item.get("index", pos)
        if not isinstance(index, int) or not 0 <= index < n or out[index] is not None:
            raise ValueError("bad index")
        out[index] = item["embedding"]
    if any(v is None for v in out):
        raise ValueError("missing index")
    if out and all(isinstance(v, str) for v in out):
        return decode_base64_rows(out)
    return out


def check_key(cls: type[HostedEmbedding], api_key: str | None, base_url: str | None) -> None:
    """Raise :func:`require_key`'s error for ``cls`` without building it (no
    connection pool, no request): commands check this before they open a database."""
    if not cls.key_required:
        return
    env_base = os.environ.get(cls.base_url_env) if cls.base_url_env else None
    require_key(resolve_api_key(api_key, cls.key_env), cls.provider, cls.key_env or "", base_url or env_base)


def require_key(secret: Secret | None, provider: str, env: str, base_url: str | None) -> Secret | None:
    """The official endpoint needs a key: fail now, in one line, when none is set.

    A ``base_url`` of one's own (a proxy, a test server) may need none.
    """
    if secret is None and base_url is None:
        raise EmbeddingError(
            f"the {provider} embedding provider needs an API key: set ${env}, embedding.api_key or --api-key"
        )
    return secret


def check_dimensions(dimensions: object) -> int | None:
    if dimensions is not None and (isinstance(dimensions, bool) or not isinstance(dimensions, int) or dimensions < 1):
        raise ValueError(f"dimensions must be a positive integer, got {dimensions!r}")
    return dimensions


def check_texts(texts: object) -> None:
    if isinstance(texts, str) or not isinstance(texts, (list, tuple)):
        raise TypeError(f"embed() expects a list of str, got {type(texts).__name__}")
    for i, t in enumerate(texts):
        if not isinstance(t, str):
            raise TypeError(f"embed() expects a list of str; item {i} is {type(t).__name__}")
