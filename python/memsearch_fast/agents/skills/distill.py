"""``memsearch skills distill --plugin P``: recurring workflows in the recent
memory journals → candidate skills, through the LLM that
``plugins.<platform>.memory_to_skill`` selects.

As memsearch 0.4.23 does it, and sharing its state so the two tools agree on
what is due:

- the input is the markdown under ``input_dir`` (default
  ``<memsearch dir>/memory``); its digest (every file's relative path and
  bytes, in path order) is compared with the one of the last successful run
  in ``<memsearch dir>/.maintenance-state.json`` (key
  ``<platform>.memory_to_skill``): unchanged input is skipped, changed input
  waits ``min_interval_hours`` after the last success, ``--force`` runs anyway;
- one run at a time per platform (``.maintenance-<platform>-memory_to_skill.lock``,
  the reference's lock file; one left by a dead process is taken over);
- the prompt is the task's instructions (``prompts.memory_to_skill`` or the
  built-in ``agents/prompts/memory_to_skill.txt``, with ``{{AGENT_NAME}}``,
  ``{{PROJECT_DIR}}``, ``{{INPUT_DIR}}`` and ``{{MIN_OCCURRENCES}}``
  replaced), the existing candidates with their bodies (so a revision
  improves them), and the newest journals (at most 12, oldest cut first), 80,000 characters in all;
- the answer is a JSON object ``{"skills": [...]}``; each usable entry becomes
  or refreshes a candidate, one commit for the run; a failure (the call, an
  error text or refusal as the answer, no such JSON) stores nothing and is
  recorded in the state as the reference records it.

Routing is :mod:`memsearch_fast.agents.routing`'s: ``provider`` names an
``[llm.providers.<name>]`` table or a protocol (``openai``, ``anthropic``,
``ollama``, ``claude-code``...); ``model`` overrides the model. The default
``native`` provider is the host agent's background pass, so the
command refuses it (exit status 2) as the reference does.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import re
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memsearch_fast._os import pid_alive
from memsearch_fast.agents import prompts, routing
from memsearch_fast.agents.skills import history, store
from memsearch_fast.errors import one_line
from memsearch_fast.llm import LLMError, LLMSettings, get_llm
from memsearch_fast.llm.base import resolve_env

if TYPE_CHECKING:
    from memsearch_fast.config.settings import MemoryToSkillTask, Settings

TASK = "memory_to_skill"
MAX_PROMPT_CHARS = 80_000
MAX_JOURNALS = 12
MAX_EXISTING_BODY_CHARS = 2000
#: What a host agent's CLI may run while distilling: the read-only recall commands that recover
#: the exact commands a journal's summary dropped (the prompt says how).
DRILL_COMMANDS = ("memsearch transcript", "memsearch expand")
#: Seconds per LLM attempt: a large prompt and a JSON answer take longer than notes.
LLM_TIMEOUT = 300.0
#: A lock file without a readable pid is taken over after this many seconds.
STALE_LOCK_SECONDS = 600


class NeedsAPIProvider(LLMError):
    """The task's provider is ``native`` (the host agent's background pass)."""


@dataclass
class DistillResult:
    action: str  # "distilled" | "none" | "skip" | "disabled" | "locked"
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    reason: str = ""
    skipped: bool = False


# -- configuration ---------------------------------------------------------------------------


def task_config(cfg: Settings, platform: str) -> MemoryToSkillTask:
    """``plugins.<platform>.memory_to_skill`` of a resolved configuration."""
    return cfg.plugins[platform].memory_to_skill


def provider_name(cfg: Settings, platform: str) -> str:
    return routing.provider_name(cfg, platform, TASK)


def native_refusal(platform: str) -> str:
    return (
        "'skills distill' needs an API provider; the 'native' provider runs only in the agent's background "
        "pass (or use the /memory-to-skill skill). Configure one, e.g.: memsearch config set "
        f"plugins.{platform}.{TASK}.provider <name>"
    )


def route(cfg: Settings, platform: str) -> LLMSettings:
    """The LLM that distills for *platform* (*cfg* as ``config.resolve(resolve_env=False)`` gives it)."""

    def refuse(_model: str) -> LLMSettings:
        raise NeedsAPIProvider(native_refusal(platform))

    return routing.route(cfg, platform, TASK, refuse)


def resolve_task_path(raw: str, project: Path, mem_root: Path) -> Path:
    """A configured path: the default ``.memsearch/memory`` follows ``$MEMSEARCH_DIR``;
    others are relative to the project."""
    if raw == ".memsearch/memory":
        return (mem_root / "memory").resolve()
    path = Path(raw).expanduser()
    if not path.is_absolute():
        path = project / path
    return path.resolve()


# -- input -----------------------------------------------------------------------------------


def journal_files(input_dir: Path) -> list[Path]:
    """Markdown files under *input_dir*, in path order. Links are left out (directory
    links are not followed either): a cloned repository's journal linked to a private
    file must not reach a model's prompt."""
    if not input_dir.is_dir():
        return []
    return sorted(p for p in input_dir.rglob("*.md") if not p.is_symlink() and p.is_file())


def input_digest(input_dir: Path) -> str:
    """The reference's digest of the input: each file's relative path and bytes, in path order."""
    if not input_dir.is_dir():
        return "sha256:empty"
    h = hashlib.sha256()
    for path in journal_files(input_dir):
        h.update(str(path.relative_to(input_dir)).encode())
        h.update(b"\0")
        h.update(path.read_bytes())
        h.update(b"\0")
    return f"sha256:{h.hexdigest()}"


def is_due(min_interval_hours: int, entry: Mapping[str, Any], digest: str, force: bool) -> tuple[bool, str]:
    """(due?, why): forced; else skipped while the input is unchanged, then waiting
    *min_interval_hours* after the last success."""
    if force:
        return True, "force"
    if entry.get("last_input_digest") == digest:
        return False, "input unchanged"
    last = entry.get("last_success_at")
    if not last:
        return True, "never run"
    try:
        when = datetime.fromisoformat(str(last).replace("Z", "+00:00"))
        age_hours = (datetime.now(timezone.utc) - when).total_seconds() / 3600
    except (ValueError, TypeError):
        return True, "invalid state timestamp"
    if age_hours < max(0, min_interval_hours):
        return False, f"not due for {min_interval_hours}h"
    return True, "due"


def recent_journals(input_dir: Path, budget: int) -> str:
    """The newest journals (by modification time, at most 12), each after a
    ``<!-- source:PATH -->`` line; beyond *budget* characters the oldest text goes."""
    dated: list[tuple[float, Path]] = []
    for path in journal_files(input_dir):
        with contextlib.suppress(OSError):
            dated.append((path.stat().st_mtime, path))
    dated.sort(key=lambda item: item[0])
    parts: list[str] = []
    for _mtime, path in dated[-MAX_JOURNALS:]:
        with contextlib.suppress(OSError):
            parts.append(f"\n<!-- source:{path} -->\n{path.read_bytes().decode('utf-8', 'replace')}")
    text = "\n".join(parts)
    if len(text) <= budget:
        return text
    if budget <= 0:
        return ""
    marker = "[older journal entries truncated]\n"
    if budget <= len(marker):
        return text[-budget:]
    return marker + text[-(budget - len(marker)) :]


def load_template(cfg: Settings, warn: Callable[[str], None] | None = None) -> str:
    """``prompts.memory_to_skill`` (a file), or the built-in instructions when it is
    unset or unreadable (*warn* is told)."""
    return prompts.configured(cfg, TASK, warn)


def build_prompt(
    template: str,
    *,
    agent: str,
    project: Path,
    input_dir: Path,
    min_occurrences: int,
    existing: list[tuple[str, str, str]],
) -> str:
    for marker, value in {
        "{{AGENT_NAME}}": agent,
        "{{PROJECT_DIR}}": str(project),
        "{{INPUT_DIR}}": str(input_dir),
        "{{MIN_OCCURRENCES}}": str(min_occurrences),
    }.items():
        template = template.replace(marker, value)
    if existing:
        blocks = [
            f"### {name}\n{description}\n\nCurrent body:\n```markdown\n{body}\n```"
            for name, description, body in existing
        ]
        existing_text = "\n\n".join(blocks)
    else:
        existing_text = "(none)"
    budget = max(0, MAX_PROMPT_CHARS - len(template) - len(existing_text) - 512)
    journals = recent_journals(input_dir, budget)
    prompt = (
        f"{template.rstrip()}\n\n## Existing skills (you may revise these)\n\n{existing_text}\n\n"
        f"## Recent memory journal entries\n\n```markdown\n{journals.strip()}\n```\n"
    )
    if len(prompt) > MAX_PROMPT_CHARS:
        prompt = prompt[:MAX_PROMPT_CHARS] + "\n\n[truncated]\n"
    return prompt


# -- the answer ------------------------------------------------------------------------------

_FENCED = re.compile(r"```(?:json)?\s*(\{.*\})\s*```", re.S)


def json_object(text: str, key: str = "skills") -> dict[str, Any] | None:
    """The answer's JSON object with a *key* key: the whole text, a fenced
    block, or the first such object found in surrounding prose."""
    candidates = [text]
    fenced = _FENCED.search(text)
    if fenced:
        candidates.append(fenced.group(1))
    for candidate in candidates:
        try:
            value = json.loads(candidate)
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict):
            return value
    decoder = json.JSONDecoder()
    start = text.find("{")
    tries = 0
    while start >= 0 and tries < 200:
        tries += 1
        try:
            value, _end = decoder.raw_decode(text, start)
        except json.JSONDecodeError:
            value = None
        if isinstance(value, dict) and key in value:
            return value
        start = text.find("{", start + 1)
    return None


def _text(value: Any) -> str:
    return value.strip() if isinstance(value, str) else ""


def parse_answer(raw: str) -> list[store.Candidate]:
    """The usable skills of an answer; :class:`LLMError` when it is not the expected JSON.

    An entry needs a description and a body (strings); its name is slugified;
    a repeated name keeps its first entry.
    """
    data = json_object(raw.strip())
    if data is None:
        raise LLMError(f"{TASK}: the LLM did not answer with a JSON object: {one_line(raw, 120)}")
    skills = data.get("skills")
    if not isinstance(skills, list):
        raise LLMError(f"{TASK}: the LLM answer has no 'skills' list")
    out: list[store.Candidate] = []
    seen: set[str] = set()
    for item in skills:
        if not isinstance(item, dict):
            continue
        name = store.slugify(_text(item.get("name")))
        description, body = _text(item.get("description")), _text(item.get("body"))
        if not description or not body or name in seen:
            continue
        seen.add(name)
        occurrences = item.get("occurrences")
        sources = item.get("sources")
        out.append(
            store.Candidate(
                name,
                description,
                body,
                occurrences if isinstance(occurrences, int) and not isinstance(occurrences, bool) else None,
                [s for s in sources if isinstance(s, str)] if isinstance(sources, list) else [],
                _text(item.get("reason")),
            )
        )
    return out


# -- state and lock --------------------------------------------------------------------------


def load_state(path: Path) -> dict[str, Any]:
    with contextlib.suppress(store.SkillError, OSError):
        return store.load_json_object(store.read_regular(path)) or {}
    return {}


def save_entry(path: Path, key: str, entry: dict[str, Any]) -> None:
    """Set *key* in the shared state file, keeping every other task's entry as it is now."""
    state = load_state(path)
    state[key] = entry
    data = (json.dumps(state, indent=2, sort_keys=True) + "\n").encode("utf-8")
    mode = 0o600
    with contextlib.suppress(OSError):
        mode = path.stat().st_mode & 0o777
    store.write_atomic(path, data, mode)


def record_failure(state_path: Path, key: str, digest: str, output: Path, error: str) -> None:
    """The task failed on this input: say so in its state entry (kept best effort)."""
    last = load_state(state_path).get(key)
    entry = dict(last) if isinstance(last, dict) else {}
    stamp = store.now()
    entry.update(
        {
            "last_checked_at": stamp,
            "last_failed_at": stamp,
            "failed_input_digest": digest,
            "last_action": "error",
            "last_error": error,
            "output_file": str(output),
        }
    )
    with contextlib.suppress(OSError):
        save_entry(state_path, key, entry)


def _format_error(exc: BaseException, limit: int = 2000) -> str:
    message = f"{type(exc).__name__}: {exc}"
    if len(message) > limit:
        return message[: limit - len("... [truncated]")] + "... [truncated]"
    return message


def _stale(path: Path) -> bool:
    """A lock left behind: its pid is gone, or it has no pid and is old."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace").strip()
        age = time.time() - path.stat().st_mtime
    except OSError:
        return False
    if text.isdigit():
        return int(text) != os.getpid() and not pid_alive(int(text))
    return age > STALE_LOCK_SECONDS


@contextlib.contextmanager
def task_lock(path: Path) -> Iterator[bool]:
    """The reference's lock file (created exclusively, holding the pid): yields
    whether this process got it. A lock whose process is gone is taken over."""
    fd = -1
    for _attempt in range(2):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
            break
        except FileExistsError:
            if not _stale(path):
                break
            with contextlib.suppress(OSError):
                path.unlink()
    if fd < 0:
        yield False
        return
    try:
        os.write(fd, str(os.getpid()).encode())
        yield True
    finally:
        os.close(fd)
        with contextlib.suppress(OSError):
            path.unlink()


# -- the run ---------------------------------------------------------------------------------


def _call_llm(settings: LLMSettings, prompt: str) -> str:
    if settings.timeout is None:
        settings = dataclasses.replace(settings, timeout=LLM_TIMEOUT)
    return get_llm(settings).complete(prompt)


def distill(
    cfg: Settings,
    platform: str,
    *,
    project_dir: str | Path | None = None,
    memsearch_dir: str | Path | None = None,
    force: bool = False,
    require_enabled: bool = False,
    complete: Callable[[LLMSettings, str], str] | None = None,
    warn: Callable[[str], None] | None = None,
    native: Callable[[str], LLMSettings] | None = None,
) -> DistillResult:
    """Distill candidates from the recent journals when the input changed and the task is due.

    *require_enabled* makes ``memory_to_skill.enabled = false`` a skip (the
    background pass); an explicit command runs regardless. *complete* replaces
    the LLM call (``(settings, prompt) -> answer``); *native* runs a ``native``
    provider (the hooks' background pass gives the host CLI) instead of refusing it.
    """
    task = task_config(cfg, platform)
    if require_enabled and not task.enabled:
        return DistillResult("disabled", skipped=True)
    project, mem_root = store.resolve_roots(project_dir, memsearch_dir)
    store.make_private_dir(mem_root)
    raw_input = resolve_env(task.input_dir, f"plugins.{platform}.{TASK}.input_dir")
    input_dir = resolve_task_path(raw_input or str(mem_root / "memory"), project, mem_root)

    state_path = mem_root / ".maintenance-state.json"
    key = f"{platform}.{TASK}"
    digest = input_digest(input_dir)
    previous = load_state(state_path).get(key)
    previous = previous if isinstance(previous, dict) else {}
    due, reason = is_due(task.min_interval_hours, previous, digest, force)
    if not due:
        return DistillResult("skip", reason=reason, skipped=True)
    if not journal_files(input_dir):
        return DistillResult("skip", reason=f"no memory journals in {input_dir}", skipped=True)

    with task_lock(mem_root / f".maintenance-{platform}-{TASK}.lock") as locked:
        if not locked:
            return DistillResult("locked", skipped=True)
        root = store.ensure_store(mem_root)
        try:
            settings = route(cfg, platform) if native is None else routing.route(cfg, platform, TASK, native)
            settings = dataclasses.replace(settings, tools=DRILL_COMMANDS)
            template = load_template(cfg, warn)
            prompt = build_prompt(
                template,
                agent=platform,
                project=project,
                input_dir=input_dir,
                min_occurrences=task.min_occurrences,
                existing=store.existing_candidates(mem_root, MAX_EXISTING_BODY_CHARS),
            )
            answer = (complete or _call_llm)(settings, prompt)
            skills = parse_answer(answer)
            created: list[str] = []
            updated: list[str] = []
            with store.store_lock(root):
                for skill in skills:
                    outcome = store.write_candidate(root, skill)
                    (created if outcome == "created" else updated).append(skill.name)
                summary = ", ".join(
                    part
                    for part in (f"{len(created)} new" if created else "", f"{len(updated)} revised" if updated else "")
                    if part
                )
                history.commit(root, f"skills distill [{platform}]: {summary or 'no change'}")
            stamp = store.now()
            save_entry(
                state_path,
                key,
                {
                    "last_checked_at": stamp,
                    "last_success_at": stamp,
                    "last_input_digest": digest,
                    "last_action": "distilled" if created or updated else "none",
                    "output_file": str(root),
                },
            )
        except Exception as exc:
            record_failure(state_path, key, digest, root, _format_error(exc))
            raise
    return DistillResult("distilled" if created or updated else "none", created, updated)
