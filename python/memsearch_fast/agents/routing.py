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

from collections.abc import Callable
from typing import TYPE_CHECKING

from memsearch_fast.llm import PROTOCOLS, LLMError, LLMSettings
from memsearch_fast.llm.base import resolve_env

if TYPE_CHECKING:
    from memsearch_fast.config.settings import Settings

#: Protocols that are the same wire format under two names.
_SAME_PROTOCOL = {"openai-compatible": "openai"}


def _task(cfg: Settings, platform: str, task: str) -> tuple[str, str]:
    """The task's ``provider`` and ``model`` (``env:`` references resolved)."""
    table = getattr(cfg.plugins[platform], task)
    where = f"plugins.{platform}.{task}"
    return resolve_env(table.provider, f"{where}.provider"), resolve_env(table.model, f"{where}.model")


def provider_name(cfg: Settings, platform: str, task: str) -> str:
    """The task's ``provider`` (``env:`` references resolved), ``native`` when unset."""
    return _task(cfg, platform, task)[0] or "native"


def route(cfg: Settings, platform: str, task: str, native: Callable[[str], LLMSettings]) -> LLMSettings:
    """The LLM that runs *task* for *platform* (*cfg* as ``config.resolve(resolve_env=False)``
    gives it); a ``native`` provider is ``native(model)``, which may raise instead."""
    name, model = _task(cfg, platform, task)
    name = name or "native"
    if name == "native":
        return native(model)
    llm = cfg.llm
    if name in llm.malformed_providers:
        raise LLMError(f"llm.providers.{name} must be a table ([llm.providers.{name}] with type, model...)")
    if name in llm.providers:
        entry = llm.providers[name]
        protocol = resolve_env(entry.type, f"llm.providers.{name}.type") or name
        if protocol not in PROTOCOLS:
            raise LLMError(
                f"unknown LLM provider type {protocol!r} (llm.providers.{name}.type); "
                f"known types: {', '.join(PROTOCOLS)}"
            )
        return LLMSettings(
            protocol,
            model or resolve_env(entry.model, f"llm.providers.{name}.model"),
            entry.base_url,
            entry.api_key,
        )
    if name in PROTOCOLS:
        top = resolve_env(llm.provider, "llm.provider")
        if _SAME_PROTOCOL.get(top, top) != _SAME_PROTOCOL.get(name, name):
            return LLMSettings(name, model)
        model = model or resolve_env(llm.model, "llm.model")
        return LLMSettings(name, model, llm.base_url, llm.api_key)
    raise LLMError(
        f"unknown LLM provider {name!r} (plugins.{platform}.{task}.provider); configure [llm.providers.{name}] "
        f"or use one of {', '.join(PROTOCOLS)}"
    )
