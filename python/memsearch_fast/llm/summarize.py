"""`memsearch summarize`: the text of one conversation turn → third-person
bullet notes, from the LLM that ``plugins.<platform>.summarize`` selects.

Routing, as in memsearch 0.4.23: ``provider`` names a table
``[llm.providers.<name>]`` (``type``, ``model``, ``base_url``, ``api_key``);
``plugins.<platform>.summarize.model`` overrides its model. Beyond the
reference: ``provider`` may also be a protocol name (``anthropic``,
``ollama``...; the ``[llm]`` settings apply when ``llm.provider`` is that
protocol), and an empty or ``native`` provider runs the host agent's own CLI
for Claude Code (``claude -p``) and Codex (``codex exec``); other platforms
have no host CLI and keep the reference's answer (exit status 2).

The prompt is ``prompts.summarize`` (a file; ``{{AGENT_NAME}}`` is replaced)
or the built-in one, then a blank line, ``Transcript:`` and the turn.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from memsearch_fast.config.schema import PLUGIN_PLATFORMS, canonical_key
from memsearch_fast.errors import MemsearchError
from memsearch_fast.llm import PROTOCOLS, LLMError, LLMSettings, get_llm
from memsearch_fast.llm.base import resolve_env

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
#: Protocols that are the same wire format under two names.
_SAME_PROTOCOL = {"openai-compatible": "openai"}

PROMPT = (
    "You take notes in the third person. What follows is the transcript of a single conversation turn "
    f"between User and {AGENT_PLACEHOLDER}.\n\n"
    "Write down what happened as factual notes: 2 to 10 bullet points, each line starting with '- '. "
    "Call the user 'User'. The first bullet says what User asked for or wanted; the others say what "
    f"{AGENT_PLACEHOLDER} did, found, changed, configured, tested, explained or decided, and what it could "
    "not finish. Language rule, mandatory: write every bullet in the main language of the [User] text; when "
    "User mixes languages, use the one that dominates what User wrote. Be concrete where it helps: name the "
    "important files read or edited, searches or research done, refactorings, commands and tests run, key "
    "findings and concrete results. Prefer the outcome User sees over the mechanics of the transcript. Do not "
    "answer User's question yourself. Output nothing but the bullet points."
)


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


def route(cfg: Settings, platform: str) -> LLMSettings:
    """The LLM that summarizes for *platform* (*cfg* as ``config.resolve(resolve_env=False)`` gives it)."""
    task = cfg.plugins[platform].summarize
    name = resolve_env(task.provider, f"plugins.{platform}.summarize.provider")
    model = resolve_env(task.model, f"plugins.{platform}.summarize.model")
    llm = cfg.llm
    if not name or name == "native":
        protocol = NATIVE_PROTOCOL.get(platform)
        if protocol is None:
            raise NativeSummarization(
                f"plugin {platform!r} is configured for native summarization; no memsearch-managed provider selected"
            )
        return LLMSettings(protocol, model)
    if name in llm.malformed_providers:
        raise LLMError(f"llm.providers.{name} must be a table ([llm.providers.{name}] with type, model...)")
    if name in llm.providers:
        entry = llm.providers[name]
        protocol = resolve_env(entry.type, f"llm.providers.{name}.type") or name
        return LLMSettings(
            _known(protocol, f"llm.providers.{name}.type"),
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
        f"unknown LLM provider {name!r} (plugins.{platform}.summarize.provider); configure [llm.providers.{name}] "
        f"or use one of {', '.join(PROTOCOLS)}"
    )


def _known(protocol: str, where: str) -> str:
    if protocol not in PROTOCOLS:
        raise LLMError(f"unknown LLM provider type {protocol!r} ({where}); known types: {', '.join(PROTOCOLS)}")
    return protocol


def load_prompt(cfg: Settings, agent_name: str, warn: Callable[[str], None] | None = None) -> str:
    """``prompts.summarize`` with ``{{AGENT_NAME}}`` replaced by *agent_name*, or the
    built-in prompt when none is set or the file cannot be read (*warn* is told)."""
    template = PROMPT
    configured = resolve_env(cfg.prompts.summarize, "prompts.summarize")
    if configured:
        path = Path(configured).expanduser()
        try:
            template = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            if warn is not None:
                reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
                warn(f"warning: cannot read prompts.summarize {path} ({reason}); using the built-in prompt")
    return template.replace(AGENT_PLACEHOLDER, agent_name)


def build_prompt(instructions: str, transcript: str) -> str:
    return f"{instructions.rstrip()}\n\nTranscript:\n{transcript}"


def summarize(settings: LLMSettings, instructions: str, transcript: str) -> str:
    """Notes for *transcript*; :class:`LLMError` (one line) instead of any unusable answer."""
    return get_llm(settings).complete(build_prompt(instructions, transcript))
