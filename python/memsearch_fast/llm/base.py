"""What every LLM client shares: settings, the error type, the HTTP call with
bounded retries, and the check that an answer is notes and not an error.

HTTP goes through the embedding providers' plumbing (``embeddings._http``):
the same JSON client (urllib, or httpx when installed), the same retries with
backoff on 408/409/425/429/5xx and network errors (``Retry-After`` honoured,
capped), the same one-line server messages with the API key scrubbed. A call
blocks; run it in a thread from async code.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any

from memsearch_fast.config.schema import DEFAULT_LLM_MODELS
from memsearch_fast.errors import MemsearchError, one_line


class LLMError(MemsearchError, RuntimeError):
    """An LLM call failed or gave an unusable answer; the message is one line.

    ``status`` is the HTTP status code (0 when there was none).
    """

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(one_line(message))
        self.status = status


@dataclass(frozen=True)
class LLMSettings:
    """Where and how to call a model. ``api_key`` and ``base_url`` may be ``env:VAR``;
    empty ones fall back to the protocol's environment variables and defaults."""

    protocol: str
    model: str = ""
    base_url: str = ""
    api_key: str = ""
    timeout: float | None = None  # seconds per attempt; None: the protocol's default
    max_retries: int = 2
    retry_base_delay: float = 1.0
    retry_max_delay: float = 10.0
    #: Commands a host agent's CLI may run while it answers (``memsearch transcript``...), so a
    #: task can check a summary against the original; empty: no tools. HTTP models ignore it.
    tools: tuple[str, ...] = ()


class LLM:
    """One configured model. Subclasses implement ``_complete``; ``complete``
    returns its answer only when it reads as notes (see :func:`check_answer`)."""

    #: Shown in errors ("Anthropic API", "claude -p"...).
    kind = "LLM"
    default_timeout = 90.0

    def __init__(self, settings: LLMSettings) -> None:
        if settings.max_retries < 0 or (settings.timeout is not None and settings.timeout <= 0):
            raise ValueError("max_retries must be >= 0 and timeout > 0")
        self.settings = settings
        self.model = settings.model.strip() or DEFAULT_LLM_MODELS.get(settings.protocol, "")
        self.timeout = settings.timeout or self.default_timeout

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model={self.model!r})"  # never the key

    def complete(self, prompt: str) -> str:
        """The model's answer to *prompt*, stripped; :class:`LLMError` when the call
        fails or the answer is empty, an error message or a refusal."""
        return check_answer(self._complete(prompt), f"{self.kind} ({self.model})")

    def _complete(self, prompt: str) -> str:
        raise NotImplementedError


class HttpLLM(LLM):
    """A model behind an HTTP API: subclasses build the URL, headers, payload and read the answer."""

    #: Environment variables for the API key and the base URL when the settings leave them empty.
    key_env: tuple[str, ...] = ()
    base_url_env: str | None = None
    default_base_url = ""
    #: Whether the default endpoint needs a key (a custom base URL may not).
    key_required = True
    #: Scheme assumed for a base URL written without one (``localhost:11434``).
    default_scheme = "https"

    def __init__(self, settings: LLMSettings) -> None:
        from memsearch_fast.embeddings._http import normalize_base_url, resolve_api_key

        super().__init__(settings)
        raw_base = resolve_env(settings.base_url, "base_url")
        env_base = os.environ.get(self.base_url_env) if self.base_url_env else None
        self.base_url = normalize_base_url(raw_base or env_base or self.default_base_url, self.default_scheme)
        key = settings.api_key.strip() or next((f"env:{n}" for n in self.key_env if os.environ.get(n)), "")
        self._secret = resolve_api_key(key, None) if key else None
        if self._secret is None and self.key_required and self.base_url == self.default_base_url:
            names = " or ".join(f"${name}" for name in self.key_env)
            raise LLMError(f"{self.kind} needs an API key: set {names} or the provider's api_key (env:VAR)")

    # subclass hooks -------------------------------------------------------------

    def _url(self) -> str:
        raise NotImplementedError

    def _headers(self) -> dict[str, str]:
        """Bearer auth when a key is set (OpenAI-compatible servers and Ollama)."""
        key = self._key()
        return {"Authorization": f"Bearer {key}"} if key else {}

    def _payload(self, prompt: str) -> dict[str, Any]:
        """One user message, no streaming: the chat shape OpenAI and Ollama share."""
        return {"model": self.model, "messages": [{"role": "user", "content": prompt}], "stream": False}

    def _answer(self, data: Any) -> str:
        raise NotImplementedError

    # ----------------------------------------------------------------------------

    def _complete(self, prompt: str) -> str:
        data = self._post(self._url(), self._payload(prompt), self._headers())
        try:
            return self._answer(data)
        except (KeyError, IndexError, TypeError, AttributeError):
            raise LLMError(f"{self.kind} answered in an unexpected format (no answer text found)") from None

    def _post(self, url: str, payload: dict[str, Any], headers: dict[str, str]) -> Any:
        """POST with the shared retry loop; errors become :class:`LLMError`."""
        import asyncio
        from concurrent.futures import ThreadPoolExecutor

        from memsearch_fast.embeddings._http import JsonClient, post_json
        from memsearch_fast.errors import EmbeddingAPIError

        client = JsonClient(self.timeout)
        s = self.settings
        try:
            with ThreadPoolExecutor(1, thread_name_prefix="memsearch-llm") as pool:
                return asyncio.run(
                    post_json(
                        client,
                        pool,
                        url,
                        payload,
                        headers=headers,
                        secret=self._secret,
                        what=self.kind,
                        max_retries=s.max_retries,
                        base_delay=s.retry_base_delay,
                        max_delay=s.retry_max_delay,
                    )
                )
        except EmbeddingAPIError as exc:
            raise LLMError(str(exc), exc.status) from None
        finally:
            client.close()

    def _key(self) -> str:
        return self._secret.reveal() if self._secret is not None else ""


def resolve_env(value: str, what: str) -> str:
    """``env:VAR`` → ``$VAR`` (a :class:`~memsearch_fast.config.schema.ConfigError` when unset); stripped."""
    from memsearch_fast.config.schema import resolve_env_ref

    return resolve_env_ref(value.strip(), what).strip()


# -- is it notes? --------------------------------------------------------------------------

# A reasoning model's thoughts before its answer (Ollama's qwen3, deepseek-r1...).
_THINKING = re.compile(r"\A\s*<think>.*?</think>", re.S | re.I)
# How error texts begin when a CLI or a proxy hands them over as the answer: Claude
# Code's "Credit balance is too low" / "API Error: 529 …" / "Invalid API key · Please
# run /login", gateways' "Bad Gateway", JSON error bodies, HTML error pages.
_ERROR_START = re.compile(
    r"""^(?:
        (?:api\s+)?error\s*[:(\[\d] | an?\s+(?:unexpected\s+)?error\s+(?:has\s+)?occurred
        | (?:your\s+)?credit\s+balance | insufficient\s+(?:credits?|quota|balance|funds)
        | you\s+(?:have\s+)?exceeded | you['’]ve\s+(?:hit|reached|exceeded)\s+your
        | (?:claude\s+ai\s+)?usage\s+limit\s+reached | quota\s+(?:exceeded|exhausted)
        | invalid\s+api\s+key | please\s+run\s+/login | not\s+logged\s+in | unauthori[sz]ed\b
        | authentication\s+(?:error|failed|required) | forbidden\b | overloaded\b
        | rate[\s_-]?limit(?:ed\b|_error|\s+(?:exceeded|reached|error)) | too\s+many\s+requests
        | service\s+(?:temporarily\s+)?unavailable | internal\s+server\s+error | bad\s+gateway
        | gateway\s+time-?out | request\s+timed\s+out | timeout\s+(?:error|exceeded|after)
        | prompt\s+is\s+too\s+long | context[\s_]length[\s_]exceeded | maximum\s+context\s+length
        | execution\s+error | (?:http\s*)?[45]\d\d\s*[:-]?\s*(?:bad|not|internal|service|gateway|too|forbidden
        | unauthori[sz]ed|payment|error|request)
        | \{\s*"(?:type|error|detail|message)" | <\s*(?:!doctype|html|head|body|title)\b | <\?xml
    )""",
    re.I | re.X,
)
# A refusal is first person; notes are third person.
_REFUSAL_START = re.compile(
    r"""^(?:
        i['’]m\s+sorry | i\s+am\s+sorry | sorry\b | i\s+apologi[sz]e | unfortunately,?\s+i\b
        | i\s*(?:can(?:no|['’])t|cannot|won['’]t|will\s+not|(?:\s+am|['’]m)\s+(?:unable|not\s+able))
        | as\s+an\s+ai\b
    )""",
    re.I | re.X,
)


def check_answer(text: str | None, source: str) -> str:
    """*text* stripped (a leading ``<think>`` block removed), or :class:`LLMError`
    when it is empty or begins like an error message, an HTML page or a refusal.

    Only the first line is judged: notes begin with a bullet, so a note that
    mentions a rate limit or an error further on is kept.
    """
    answer = _THINKING.sub("", text or "", count=1).strip()
    if not answer:
        raise LLMError(f"{source} returned an empty answer")
    first = answer.splitlines()[0].strip()
    if _ERROR_START.match(first):
        raise LLMError(f"{source} returned an error instead of notes: {one_line(first, 160)}")
    if _REFUSAL_START.match(first):
        raise LLMError(f"{source} refused: {one_line(first, 160)}")
    return answer
