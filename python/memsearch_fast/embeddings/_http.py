"""JSON-over-HTTP plumbing shared by the server-backed providers.

Uses httpx (connection reuse) when it is installed and the standard library's
urllib otherwise, so no HTTP dependency is required. Requests block in a small
thread pool whose size bounds the requests in flight; retries wait with
``asyncio.sleep`` so a backing-off request holds no thread. API keys live in a
``Secret`` whose repr is masked and are scrubbed from every error message.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import os
import random
import time
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import orjson

from memsearch_fast.errors import EmbeddingAPIError, one_line

RETRY_STATUSES = frozenset({408, 409, 425, 429, 500, 502, 503, 504, 529})
_USER_AGENT = "memsearch-fast"


def dumps(payload: Any) -> bytes:
    """*payload* as UTF-8 JSON: orjson, 2-3 times the standard library's speed on
    the requests of an index run; json for what orjson refuses (an int past 64
    bits, a lone surrogate), so what is sent or refused is as before."""
    try:
        return orjson.dumps(payload)
    except TypeError:
        return json.dumps(payload, ensure_ascii=False).encode("utf-8")


def loads(body: bytes) -> Any:
    """An answer's JSON: orjson (a 512-vector answer of base64 rows, 1 MB, 0.7
    ms against 1.7), json for what only it reads (NaN, Infinity)."""
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        return json.loads(body)


class Secret:
    """Holds an API key without ever showing it (repr, str, pickling)."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret('***')"

    __str__ = __repr__

    def __reduce__(self) -> Any:
        raise TypeError("API keys are not picklable")


def resolve_api_key(api_key: str | None, default_env: str | None) -> Secret | None:
    """``None`` -> ``$default_env``; ``"env:VAR"`` -> ``$VAR``; anything else is the key itself."""
    if api_key is None:
        value = os.environ.get(default_env) if default_env else None
        return Secret(value) if value else None
    from memsearch_fast.config.schema import resolve_env_ref

    value = resolve_env_ref(api_key, "api_key")  # ConfigError (a ValueError) when unset
    return Secret(value) if value else None


def safe_url(url: str) -> str:
    """*url* without user:password and query string, for messages."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


def normalize_base_url(url: str, default_scheme: str = "http") -> str:
    url = url.strip().rstrip("/")
    if "://" not in url:
        url = f"{default_scheme}://{url}"
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"base_url must be an http(s) URL, got {safe_url(url)!r}")
    return url


@dataclass(frozen=True)
class Response:
    status: int
    headers: dict[str, str]  # lower-cased names
    body: bytes


class TransportError(Exception):
    """The server could not be reached (connection refused, DNS, timeout)."""


class JsonClient:
    """Blocking JSON POST; thread-safe, one instance per provider."""

    def __init__(self, timeout: float) -> None:
        self._timeout = timeout
        try:
            import httpx  # type: ignore[import-not-found, unused-ignore]  # optional dependency
        except ImportError:
            self._httpx: Any = None
            self._client: Any = None
        else:
            self._httpx = httpx
            self._client = httpx.Client(timeout=timeout, follow_redirects=False)

    @property
    def backend(self) -> str:
        return "httpx" if self._client is not None else "urllib"

    def post(self, url: str, payload: Any, headers: dict[str, str]) -> Response:
        body = dumps(payload)
        all_headers = {"Content-Type": "application/json", "Accept": "application/json", "User-Agent": _USER_AGENT}
        all_headers.update(headers)
        if self._client is not None:
            try:
                r = self._client.post(url, content=body, headers=all_headers)
            except self._httpx.HTTPError as exc:
                raise TransportError(type(exc).__name__) from None
            return Response(r.status_code, {k.lower(): v for k, v in r.headers.items()}, r.content)
        return self._post_urllib(url, body, all_headers)

    def _post_urllib(self, url: str, body: bytes, headers: dict[str, str]) -> Response:
        import urllib.error
        import urllib.request

        class NoRedirect(urllib.request.HTTPRedirectHandler):
            """A redirect becomes an error: the Authorization header must
            never be replayed to another host (as with httpx above)."""

            def redirect_request(self, *args: Any, **kwargs: Any) -> None:
                return None

        request = urllib.request.Request(url, data=body, headers=headers, method="POST")
        opener = urllib.request.build_opener(NoRedirect)
        try:
            with opener.open(request, timeout=self._timeout) as r:  # http(s) only: checked by normalize_base_url
                return Response(r.status, {k.lower(): v for k, v in r.headers.items()}, r.read())
        except urllib.error.HTTPError as exc:
            with exc:
                data = exc.read() if exc.fp is not None else b""
                return Response(exc.code, {k.lower(): v for k, v in (exc.headers or {}).items()}, data)
        except urllib.error.URLError as exc:
            raise TransportError(str(getattr(exc, "reason", exc))) from None
        except (OSError, TimeoutError) as exc:
            raise TransportError(type(exc).__name__) from None

    def close(self) -> None:
        if self._client is not None:
            self._client.close()


def retry_delay(response: Response | None, attempt: int, base: float, cap: float) -> float:
    """Server-requested delay (``retry-after-ms`` / ``Retry-After``) else jittered exponential backoff."""
    if response is not None:
        ms = response.headers.get("retry-after-ms")
        if ms:
            try:
                return min(max(float(ms) / 1000.0, 0.0), cap)
            except ValueError:
                pass
        after = response.headers.get("retry-after")
        if after:
            try:
                return min(max(float(after), 0.0), cap)
            except ValueError:
                try:
                    wait = email.utils.parsedate_to_datetime(after).timestamp() - time.time()
                except (TypeError, ValueError):
                    wait = None
                if wait is not None:
                    return min(max(wait, 0.0), cap)
    return float(min(cap, base * 2.0**attempt)) * (0.5 + random.random() / 2)


def error_message(response: Response, secret: Secret | None) -> str:
    """First line of the server's error message, with the key scrubbed."""
    text = response.body.decode("utf-8", "replace")
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if isinstance(data, dict):
        err = data.get("error", data.get("message", data.get("detail")))
        if isinstance(err, dict):
            err = err.get("message") or err.get("code")
        text = str(err) if err else text
    line = next((ln for ln in text.splitlines() if ln.strip()), "")
    return one_line(redact(line, secret))  # redact first: a cut must not leave part of the key


def redact(text: str, secret: Secret | None) -> str:
    if secret is not None and secret.reveal():
        text = text.replace(secret.reveal(), "***")
    return text


async def post_json(
    client: JsonClient,
    executor: Executor,
    url: str,
    payload: Any,
    *,
    headers: dict[str, str],
    secret: Secret | None,
    what: str,
    max_retries: int,
    base_delay: float,
    max_delay: float,
    key_env: str | None = None,
    key_rejected: Callable[[int, str], bool] | None = None,
    decode: Callable[[bytes], Any] = loads,
) -> Any:
    """POST *payload* and return the answer as *decode* reads it (JSON), retrying 429/5xx
    and network errors.

    Raises ``EmbeddingAPIError`` with a one-line message for anything else.
    401/403, and any answer ``key_rejected(status, message)`` recognises (an
    API that reports a bad key as HTTP 400), say the key was rejected, naming
    ``key_env`` (the provider's environment variable) when given.
    """
    loop = asyncio.get_running_loop()
    where = safe_url(url)
    for attempt in range(max_retries + 1):
        response: Response | None = None
        try:
            response = await loop.run_in_executor(executor, client.post, url, payload, headers)
        except TransportError as exc:
            problem, status = f"cannot reach {where} ({redact(str(exc), secret)})", 0
        else:
            if response.status < 300:
                try:
                    return decode(response.body)
                except ValueError:
                    raise EmbeddingAPIError(f"{what} at {where} answered with invalid JSON", response.status) from None
            status = response.status
            detail = error_message(response, secret)
            if status in (401, 403) or (key_rejected is not None and key_rejected(status, detail)):
                hint = (
                    f"--api-key, embedding.api_key or ${key_env}" if key_env else "the key or its environment variable"
                )
                raise EmbeddingAPIError(f"{what} at {where} rejected the API key (HTTP {status}); check {hint}", status)
            if status == 404:
                raise EmbeddingAPIError(
                    f"{what} at {where} answered HTTP 404 (check base_url and the model name)"
                    + (f": {detail}" if detail else ""),
                    status,
                )
            problem = f"{what} at {where} answered HTTP {status}" + (f": {detail}" if detail else "")
            if status not in RETRY_STATUSES and not 500 <= status < 600:
                raise EmbeddingAPIError(problem, status)
        if attempt == max_retries:
            raise EmbeddingAPIError(f"{problem}; gave up after {max_retries + 1} attempts", status)
        await asyncio.sleep(retry_delay(response, attempt, base_delay, max_delay))
    raise AssertionError("unreachable")  # pragma: no cover
