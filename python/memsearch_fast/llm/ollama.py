"""Ollama's native chat endpoint (``POST {base_url}/api/chat``, not streamed).

The server comes from the settings, else ``$OLLAMA_HOST``, else
``http://localhost:11434``; no key is needed unless a proxy asks for one.
"""

from __future__ import annotations

from typing import Any

from memsearch_fast.llm.base import HttpLLM


class OllamaChat(HttpLLM):
    kind = "Ollama server"
    base_url_env = "OLLAMA_HOST"
    default_base_url = "http://localhost:11434"
    key_required = False
    default_scheme = "http"
    default_timeout = 180.0  # a local model may have to load first

    def _url(self) -> str:
        base = self.base_url[: -len("/api")] if self.base_url.endswith("/api") else self.base_url
        return f"{base}/api/chat"

    def _answer(self, data: Any) -> str:
        content = data["message"]["content"]
        return content if isinstance(content, str) else ""
