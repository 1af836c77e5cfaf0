"""`memsearch compact`: stored chunks → one LLM summary → today's daily log.

As memsearch 0.4.23: the chunks (all, or one source's) go to the LLM in a
prompt with a ``{chunks}`` placeholder; the summary is added to
``<output dir>/memory/YYYY-MM-DD.md`` under ``## Memory Compact HH:MM`` (a new log
starts with ``# YYYY-MM-DD``), and that file is indexed, so markdown stays
the source of truth. The LLM is ``[llm]`` (else the deprecated ``[compact]``
keys, else OpenAI); the prompt is ``--prompt``, ``--prompt-file``,
``prompts.compact``, ``compact.prompt_file`` or the built-in one
(``agents/prompts/compact.txt``).

Beyond the reference: the log is rewritten atomically (temp file, then
rename, under the daily log's lock), so a crash never leaves half a log and
a hook appending at the same moment is not lost; chunks are taken in file
and line order; a selection larger than one prompt is summarized in parts
and the parts' summaries summarized again, instead of one oversized request;
the placeholder is replaced literally, so other braces in a prompt are text.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memsearch_fast.agents import prompts
from memsearch_fast.errors import MemsearchError
from memsearch_fast.llm import LLMError, LLMSettings, get_llm
from memsearch_fast.llm.base import resolve_env

if TYPE_CHECKING:
    from memsearch_fast.config.settings import Settings

PLACEHOLDER = "{chunks}"
SEPARATOR = "\n\n---\n\n"
HEADING = "## Memory Compact"
#: Characters of chunks per LLM request; larger selections are summarized in parts.
DEFAULT_PART_CHARS = 60_000


class CompactError(MemsearchError, ValueError):
    """A usage problem with compact's inputs (one line)."""


@dataclass(frozen=True)
class CompactResult:
    summary: str
    chunks: int
    requests: int
    log: Path | None
    indexed: int


def settings(cfg: Settings, overrides: Mapping[str, str | None]) -> LLMSettings:
    """The LLM: flags, then ``[llm]``, then the deprecated ``[compact]`` keys (as 0.4.23)."""
    llm, old = cfg.llm, cfg.compact

    def pick(flag: str, new_key: str, old_key: str) -> str:
        value = overrides.get(flag)
        if value:
            return value
        return str(
            resolve_env(getattr(llm, new_key), f"llm.{new_key}")
            or resolve_env(getattr(old, old_key), f"compact.{old_key}")
        )

    protocol = pick("provider", "provider", "llm_provider") or "openai"
    return LLMSettings(
        protocol,
        pick("model", "model", "llm_model"),
        overrides.get("base_url") or llm.base_url or old.base_url,
        overrides.get("api_key") or llm.api_key or old.api_key,
    )


def template(cfg: Settings, prompt: str | None, prompt_file: str | None) -> str:
    """The prompt template, which must contain ``{chunks}``."""
    text, where = prompt, "--prompt"
    if not text:
        for path, name in (
            (prompt_file, "--prompt-file"),
            (resolve_env(cfg.prompts.compact, "prompts.compact"), "prompts.compact"),
            (resolve_env(cfg.compact.prompt_file, "compact.prompt_file"), "compact.prompt_file"),
        ):
            if path:
                try:
                    text = Path(path).expanduser().read_text(encoding="utf-8")
                except (OSError, UnicodeDecodeError) as exc:
                    reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
                    raise CompactError(f"cannot read {name} {path}: {reason}") from None
                where = name
                break
    if not text:
        return prompts.builtin("compact")
    if PLACEHOLDER not in text:
        raise CompactError(f"the prompt template ({where}) must contain the {PLACEHOLDER} placeholder")
    return text


def normalize_source(source: str | None) -> str | None:
    """A path given to ``--source`` in the absolute form sources are stored in."""
    if not source:
        return None
    candidate = Path(source).expanduser()
    if candidate.is_absolute() or candidate.exists():
        return str(candidate.resolve())
    return source


def parts(texts: Iterable[str], limit: int) -> list[list[str]]:
    """*texts* grouped in order so that each group's joined size stays within *limit*
    (a single longer text is a group of its own, clipped to *limit*)."""
    groups: list[list[str]] = [[]]
    size = 0
    for whole in texts:
        text = whole[:limit]
        if groups[-1] and size + len(SEPARATOR) + len(text) > limit:
            groups.append([])
            size = 0
        groups[-1].append(text)
        size += len(text) + len(SEPARATOR)
    return [g for g in groups if g]


def summarize(
    texts: list[str], prompt: str, complete: Callable[[str], str], limit: int = DEFAULT_PART_CHARS
) -> tuple[str, int]:
    """(summary, LLM requests) for *texts*: in parts when they exceed one prompt."""
    requests = 0
    while True:
        groups = parts(texts, limit)
        answers = []
        for group in groups:
            answers.append(complete(prompt.replace(PLACEHOLDER, SEPARATOR.join(group))).strip())
            requests += 1
        if len(answers) == 1:
            return answers[0], requests
        texts = answers  # summarize the parts' summaries


def part_chars() -> int:
    from memsearch_fast.config import environment

    return environment.integer("MEMSEARCH_COMPACT_PART_CHARS", DEFAULT_PART_CHARS)


def write(output_dir: Path, summary: str, now: datetime | None = None) -> Path:
    """Add the summary to ``<output_dir>/memory/<today>.md``, atomically, under
    ``## Memory Compact HH:MM`` (two compactions of a day stay apart)."""
    from memsearch_fast.agents import journal

    now = now or datetime.now()
    day = now.date().isoformat()
    log = output_dir / "memory" / f"{day}.md"

    def add(old: str) -> str:
        head = old if old else f"# {day}\n"
        return f"{head}\n\n{HEADING} {now:%H:%M}\n\n{summary.strip()}\n"

    journal.rewrite(log, add)
    return log


def chunk_texts(rows: Iterable[Mapping[str, Any]]) -> list[str]:
    ordered = sorted(rows, key=lambda r: (str(r.get("source", "")), int(r.get("start_line") or 0)))
    return [str(r["content"]) for r in ordered if str(r.get("content", "")).strip()]


def run(
    ms: Any,
    cfg: Settings,
    *,
    source: str | None,
    output_dir: str | None,
    llm: Mapping[str, str | None],
    prompt: str | None,
    prompt_file: str | None,
) -> CompactResult:
    """Summarize the selected chunks of *ms*'s collection into today's log and index it."""
    import asyncio

    instructions = template(cfg, prompt, prompt_file)
    client = get_llm(settings(cfg, llm))
    texts = chunk_texts(ms.chunks(source=source, fields=["content", "source", "start_line"]))
    if not texts:
        return CompactResult("", 0, 0, None, 0)
    summary, requests = summarize(texts, instructions, client.complete, part_chars())
    if not summary:
        raise LLMError("the LLM returned an empty summary")
    base = Path(output_dir).expanduser() if output_dir else Path(ms.paths[0]) if ms.paths else Path.cwd()
    log = write(base, summary)
    indexed = asyncio.run(ms.index_file(log))
    return CompactResult(summary, len(texts), requests, log, indexed)
