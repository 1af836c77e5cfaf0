"""`memsearch summarize`: the text of one conversation turn → third-person
bullet notes, from the LLM that ``plugins.<platform>.summarize`` selects.

Routing is :mod:`memsearch_fast.agents.routing`'s (``provider`` names an
``[llm.providers.<name>]`` table or a protocol; ``model`` overrides the
model). Beyond the reference, an empty or ``native`` provider runs the host
agent's own CLI for Claude Code (``claude -p``) and Codex (``codex exec``);
other platforms keep the reference's answer (exit status 2). The hooks'
capture worker also runs OpenCode's (``opencode run``) and OpenClaw's
(``openclaw agent --local``), as the reference's plugins do.

The prompt is ``prompts.summarize`` (a file; ``{{AGENT_NAME}}`` is replaced)
or the built-in one (``agents/prompts/summarize.txt``), then a blank line,
``Transcript:`` and the turn.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from memsearch_fast.agents import prompts, routing
from memsearch_fast.config.schema import PLUGIN_PLATFORMS, canonical_key
from memsearch_fast.errors import MemsearchError
from memsearch_fast.llm import LLMError, LLMSettings, get_llm

if TYPE_CHECKING:
    from memsearch_fast.config.settings import Settings

AGENT_PLACEHOLDER = "{{AGENT_NAME}}"
#: Who the notes call the agent when ``--agent-name`` is not given.
AGENT_NAMES = {
    "claude-code": "Claude Code",
    "codex": "Codex",
    "opencode": "OpenCode",
    "openclaw": "OpenClaw",
    "dsh": "dsh",
}
#: Platforms whose host agent has a CLI that can summarize ("native").
NATIVE_PROTOCOL = {"claude-code": "claude-code", "codex": "codex"}
#: Host CLIs only the hooks' capture worker runs natively, as the reference's plugins do; the
#: ``summarize`` command keeps 0.4.23's answer (exit status 2) for these platforms.
HOOK_NATIVE_PROTOCOL = {**NATIVE_PROTOCOL, "opencode": "opencode", "openclaw": "openclaw"}


class UnknownPluginError(MemsearchError, ValueError):
    """``--plugin`` names no known platform (a usage error)."""


class NativeSummarization(LLMError):
    """The platform is set to summarize natively and has no host CLI memsearch can run."""


def platform_of(plugin: str) -> str:
    """The platform ``--plugin`` names (``claude_code`` is accepted for ``claude-code``)."""
    platform = canonical_key(f"plugins.{plugin.strip()}").split(".", 1)[1]
    if platform not in PLUGIN_PLATFORMS:
        raise UnknownPluginError(f"unknown plugin {plugin!r}; expected one of {', '.join(PLUGIN_PLATFORMS)}")
    return platform


def route(cfg: Settings, platform: str, *, hook: bool = False) -> LLMSettings:
    """The LLM that summarizes for *platform* (*cfg* as ``config.resolve(resolve_env=False)`` gives it);
    *hook*: for the capture worker (see :data:`HOOK_NATIVE_PROTOCOL`)."""
    return routing.route(cfg, platform, "summarize", lambda model: _native(platform, model, hook))


def _native(platform: str, model: str, hook: bool = False) -> LLMSettings:
    """The host agent's own CLI, where the platform has one."""
    protocol = (HOOK_NATIVE_PROTOCOL if hook else NATIVE_PROTOCOL).get(platform)
    if protocol is None:
        raise NativeSummarization(
            f"plugin {platform!r} is configured for native summarization; no memsearch-managed provider selected"
        )
    return LLMSettings(protocol, model)


def load_prompt(cfg: Settings, agent_name: str, warn: Callable[[str], None] | None = None) -> str:
    """``prompts.summarize`` with ``{{AGENT_NAME}}`` replaced by *agent_name*, or the
    built-in prompt when none is set or the file cannot be read (*warn* is told)."""
    return prompts.configured(cfg, "summarize", warn).replace(AGENT_PLACEHOLDER, agent_name)


def build_prompt(instructions: str, transcript: str) -> str:
    return f"{instructions.rstrip()}\n\nTranscript:\n{transcript}"


def summarize(settings: LLMSettings, instructions: str, transcript: str) -> str:
    """Notes for *transcript*; :class:`LLMError` (one line) instead of any unusable answer."""
    return get_llm(settings).complete(build_prompt(instructions, transcript))
