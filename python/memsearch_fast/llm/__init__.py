"""LLM protocol clients for the agent tasks that write memory (summarize, compact, distill).

``get_llm(LLMSettings(protocol, model, base_url, api_key))`` returns a client
whose ``complete(prompt)`` gives the answer text or raises :class:`LLMError`
(one line; also when the answer is empty, an error text or a refusal). Each
protocol lives in its own module, imported only when it is used:

======================  =====================================================
``openai``              OpenAI chat completions and compatible servers
``openai-compatible``   the same (the reference's name for it)
``gemini``              Gemini's OpenAI-compatible endpoint
``anthropic``           Anthropic Messages
``ollama``              Ollama ``/api/chat``
``claude-code``         the ``claude -p`` CLI (the host agent, its own login)
``codex``               the ``codex exec`` CLI
======================  =====================================================
"""

from __future__ import annotations

import importlib

from memsearch_fast.llm.base import LLM, LLMError, LLMSettings, check_answer

__all__ = ["LLM", "PROTOCOLS", "LLMError", "LLMSettings", "check_answer", "get_llm"]

# protocol -> (module, class); imported by get_llm.
PROTOCOLS: dict[str, tuple[str, str]] = {
    "openai": ("memsearch_fast.llm.openai", "OpenAIChat"),
    "openai-compatible": ("memsearch_fast.llm.openai", "OpenAIChat"),
    "gemini": ("memsearch_fast.llm.openai", "GeminiChat"),
    "anthropic": ("memsearch_fast.llm.anthropic", "AnthropicMessages"),
    "ollama": ("memsearch_fast.llm.ollama", "OllamaChat"),
    "claude-code": ("memsearch_fast.llm.native", "ClaudeCode"),
    "codex": ("memsearch_fast.llm.native", "CodexExec"),
    "opencode": ("memsearch_fast.llm.native", "OpenCodeRun"),
    "openclaw": ("memsearch_fast.llm.native", "OpenClawAgent"),
}


def get_llm(settings: LLMSettings) -> LLM:
    """The client for ``settings.protocol``; :class:`LLMError` for an unknown one."""
    entry = PROTOCOLS.get(settings.protocol)
    if entry is None:
        raise LLMError(f"unknown LLM provider type {settings.protocol!r}; known types: {', '.join(PROTOCOLS)}")
    module, name = entry
    cls: type[LLM] = getattr(importlib.import_module(module), name)
    return cls(settings)
