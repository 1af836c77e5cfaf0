"""Which LLM runs an agent task: ``plugins.<platform>.<task>`` → :class:`LLMSettings`.

One rule for every task (``summarize``, ``memory_to_skill``), as in memsearch
0.4.23: ``provider`` names a table ``[llm.providers.<name>]`` (``type``,
``model``, ``base_url``, ``api_key``) and the task's ``model`` overrides its
model. Beyond the reference: ``provider`` may also be a protocol name
(``anthropic``, ``ollama``...; the ``[llm]`` settings apply when
``llm.provider`` is that protocol). An empty provider is ``native``: the
host agent's own pass, which each task answers in its own way (*native*).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from memsearch_fast.llm import PROTOCOLS, LLMError, LLMSettings
from memsearch_fast.llm.base import resolve_env

#: Protocols that are the same wire format under two names.
_SAME_PROTOCOL = {"openai-compatible": "openai"}


def _text(table: Mapping[str, Any], key: str, where: str) -> str:
    return resolve_env(str(table.get(key) or ""), f"{where}.{key}")


def provider_name(cfg: Mapping[str, Any], platform: str, task: str) -> str:
    """The task's ``provider`` (``env:`` references resolved), ``native`` when unset."""
    return _text(cfg["plugins"][platform][task], "provider", f"plugins.{platform}.{task}") or "native"


def route(cfg: Mapping[str, Any], platform: str, task: str, native: Callable[[str], LLMSettings]) -> LLMSettings:
    """The LLM that runs *task* for *platform* (*cfg* as ``config.resolve(resolve_env=False)``
    gives it); a ``native`` provider is ``native(model)``, which may raise instead."""
    where = f"plugins.{platform}.{task}"
    name = provider_name(cfg, platform, task)
    model = _text(cfg["plugins"][platform][task], "model", where)
    if name == "native":
        return native(model)
    llm = cfg.get("llm", {})
    llm = llm if isinstance(llm, Mapping) else {}
    providers = llm.get("providers")
    providers = providers if isinstance(providers, Mapping) else {}
    if name in providers:
        entry = providers[name]
        if not isinstance(entry, Mapping):
            raise LLMError(f"llm.providers.{name} must be a table ([llm.providers.{name}] with type, model...)")
        protocol = _text(entry, "type", f"llm.providers.{name}") or name
        if protocol not in PROTOCOLS:
            raise LLMError(
                f"unknown LLM provider type {protocol!r} (llm.providers.{name}.type); "
                f"known types: {', '.join(PROTOCOLS)}"
            )
        return LLMSettings(
            protocol,
            model or _text(entry, "model", f"llm.providers.{name}"),
            str(entry.get("base_url") or ""),
            str(entry.get("api_key") or ""),
        )
    if name in PROTOCOLS:
        top = _text(llm, "provider", "llm")
        if _SAME_PROTOCOL.get(top, top) != _SAME_PROTOCOL.get(name, name):
            return LLMSettings(name, model)
        model = model or _text(llm, "model", "llm")
        return LLMSettings(name, model, str(llm.get("base_url") or ""), str(llm.get("api_key") or ""))
    raise LLMError(
        f"unknown LLM provider {name!r} ({where}.provider); configure [llm.providers.{name}] "
        f"or use one of {', '.join(PROTOCOLS)}"
    )
