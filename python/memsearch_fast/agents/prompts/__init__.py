"""The agent tasks' prompts: the built-in ones are text files in this package
(``summarize``, ``compact``, ``memory_to_skill``,
``project_review``, ``user_profile``), so they read and diff as
text; ``prompts.<task>`` in the configuration names a file that replaces one.

The newline that ends a file is not part of its prompt.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from memsearch_fast.config.settings import Settings


@functools.cache
def builtin(task: str) -> str:
    """The built-in prompt of *task*, read once from ``<task>.txt`` beside this module."""
    from importlib import resources

    text = (resources.files(__name__) / f"{task}.txt").read_text(encoding="utf-8")
    return text.removesuffix("\n")


def configured(cfg: Settings, task: str, warn: Callable[[str], None] | None = None) -> str:
    """The text of the file ``prompts.<task>`` names, or the built-in prompt when it is
    unset or unreadable (*warn* is told)."""
    from memsearch_fast.llm.base import resolve_env

    name = resolve_env(getattr(cfg.prompts, task), f"prompts.{task}")
    if name:
        path = Path(name).expanduser()
        try:
            return path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            if warn is not None:
                reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
                warn(f"warning: cannot read prompts.{task} {path} ({reason}); using the built-in prompt")
    return builtin(task)
