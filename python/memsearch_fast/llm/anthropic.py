"""Anthropic Messages API (``POST {base_url}/v1/messages``).

The key comes from the settings, else ``$ANTHROPIC_API_KEY``, and is sent in
``x-api-key``; the server from the settings, else ``$ANTHROPIC_BASE_URL``,
else Anthropic. Overloaded (529) and rate-limited (429) answers are retried.
"""

from __future__ import annotations

from typing import Any

from memsearch_fast.llm.base import HttpLLM, LLMError

API_VERSION = "2023-06-01"
MAX_TOKENS = 4096


class AnthropicMessages(HttpLLM):
    kind = "Anthropic API"
    key_env = ("ANTHROPIC_API_KEY",)
    base_url_env = "ANTHROPIC_BASE_URL"
    default_base_url = "https://api.anthropic.com"

    def _url(self) -> str:
        base = self.base_url[: -len("/v1")] if self.base_url.endswith("/v1") else self.base_url
        return f"{base}/v1/messages"

    def _headers(self) -> dict[str, str]:
        headers = {"anthropic-version": API_VERSION}
        key = self._key()
        if key:
            headers["x-api-key"] = key
        return headers

    def _payload(self, prompt: str) -> dict[str, Any]:
        return {"model": self.model, "max_tokens": MAX_TOKENS, "messages": [{"role": "user", "content": prompt}]}

    def _answer(self, data: Any) -> str:
        if data.get("stop_reason") == "refusal":
            raise LLMError(f"{self.kind} ({self.model}) refused to answer")
        # Thinking blocks may come first: the answer is the text blocks.
        return "".join(block["text"] for block in data["content"] if block.get("type") == "text")
