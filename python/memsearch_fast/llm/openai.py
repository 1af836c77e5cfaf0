"""OpenAI chat completions (``POST {base_url}/chat/completions``), which most
servers speak: OpenAI, vLLM, LM Studio, LiteLLM, OpenRouter, llama.cpp's
server, and Gemini's OpenAI-compatible endpoint (:class:`GeminiChat`).

The key comes from the settings, else ``$OPENAI_API_KEY``; the server from the
settings, else ``$OPENAI_BASE_URL``, else OpenAI. A server without keys (a
local vLLM) needs none once ``base_url`` points at it.
"""

from __future__ import annotations

from typing import Any

from memsearch_fast.llm.base import HttpLLM, LLMError


class OpenAIChat(HttpLLM):
    kind = "OpenAI-compatible server"
    key_env: tuple[str, ...] = ("OPENAI_API_KEY",)
    base_url_env: str | None = "OPENAI_BASE_URL"
    default_base_url = "https://api.openai.com/v1"

    def _url(self) -> str:
        return f"{self.base_url}/chat/completions"

    def _answer(self, data: Any) -> str:
        choice = data["choices"][0]
        message = choice.get("message") or {}
        if message.get("refusal"):
            raise LLMError(f"{self.kind} ({self.model}) refused: {message['refusal']}")
        if choice.get("finish_reason") == "content_filter":
            raise LLMError(f"{self.kind} ({self.model}) withheld the answer (content filter)")
        content = message.get("content")
        if isinstance(content, list):  # content parts
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        return content if isinstance(content, str) else ""


class GeminiChat(OpenAIChat):
    """Gemini through its OpenAI-compatible endpoint: no Google SDK needed."""

    kind = "Gemini API"
    key_env = ("GEMINI_API_KEY", "GOOGLE_API_KEY")
    base_url_env = None
    default_base_url = "https://generativelanguage.googleapis.com/v1beta/openai"
