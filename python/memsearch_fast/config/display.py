"""Configuration as it may be shown: secrets masked, ``env:`` references kept or read."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from memsearch_fast.config.schema import ENV_PREFIX, is_secret, lazy_env, resolve_env_ref


def mask(value: Any) -> Any:
    """``sk-abcdef…`` → ``sk-***``; ``env:VAR`` references are not secrets and stay."""
    if not isinstance(value, str) or not value or value.startswith(ENV_PREFIX):
        return value
    return value[:3] + "***" if len(value) >= 12 else "***"


def masked(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """A copy of a config dict with every secret masked."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out[k] = masked(v, key + ".")
        else:
            out[k] = mask(v) if is_secret(key) else v
    return out


def for_display(cfg: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """A config dict (resolved with ``resolve_env=False``) as it may be shown:
    ``env:VAR`` references of ordinary keys are resolved, secrets are masked
    and their references, and those of the LLM sections, are shown as written."""
    out: dict[str, Any] = {}
    for k, v in cfg.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out[k] = for_display(v, key + ".")
        elif is_secret(key):
            out[k] = mask(v)
        elif isinstance(v, str) and not lazy_env(key):
            out[k] = resolve_env_ref(v, key)
        else:
            out[k] = v
    return out
