"""SessionEnd's background maintenance: ``project_review`` keeps PROJECT.md,
``user_profile`` keeps USER.md and ``memory_to_skill`` distills candidate
skills, each only when ``plugins.<platform>.<task>.enabled`` (all off by
default, so no model is called unasked).

SessionEnd only writes a job file and starts this worker detached
(``memsearch-hook PLATFORM maintain --job FILE``): the agent never waits for a
model. Codex has no SessionEnd event, so there (as in the reference's Codex
plugin) the tasks follow each turn's capture, in its detached worker.

As in memsearch 0.4.23, a task runs when its input (the journals under
``input_dir``) changed since its last success and ``min_interval_hours``
passed; the state (``.maintenance-state.json``, key ``<platform>.<task>``) and
lock files are the reference's, shared with ``memsearch skills distill``.

The model answers ``{"action": "none" | "replace", "reason", "content"}``;
``replace`` writes the whole file. Files are written only inside the project's
memsearch folder (``.memsearch/…`` there means ``$MEMSEARCH_DIR/…``): a
configured path that leads elsewhere, also through a link, is refused, and a
link planted at the file is replaced, never written through or read. The
provider is routed as for every task (:mod:`.routing`); ``native`` is the host
agent's CLI, with ``sonnet`` for Claude Code since this task needs judgement.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from memsearch_fast._os import UnsafePathError, is_inside
from memsearch_fast.agents import prompts, routing
from memsearch_fast.agents.log import log_error, log_info
from memsearch_fast.agents.skills import distill, store
from memsearch_fast.errors import one_line
from memsearch_fast.llm import LLMError, LLMSettings, get_llm
from memsearch_fast.llm.base import resolve_env

if TYPE_CHECKING:
    from memsearch_fast.config.settings import Settings

#: The tasks that keep one markdown file each.
FILE_TASKS = ("project_review", "user_profile")
ALL_TASKS = (*FILE_TASKS, distill.TASK)
#: The host CLI's model when the task names none (the reference's choice for maintenance).
NATIVE_MODELS = {"claude-code": "sonnet"}
MAX_PROMPT_CHARS = distill.MAX_PROMPT_CHARS
Complete = Callable[[LLMSettings, str], str]


@dataclass
class TaskResult:
    task: str
    action: str  # "none" | "replace" | "skip" | "locked"
    reason: str = ""
    output_file: str = ""


def enabled_tasks(cfg: Settings, platform: str) -> list[str]:
    """The maintenance tasks switched on for *platform* (none by default)."""
    tables = cfg.plugins[platform]
    return [task for task in ALL_TASKS if getattr(tables, task).enabled]


def native(platform: str) -> Callable[[str], LLMSettings]:
    """The host agent's CLI for a ``native`` provider (see :mod:`.routing`)."""
    from memsearch_fast.agents.summarize import HOOK_NATIVE_PROTOCOL

    def make(model: str) -> LLMSettings:
        protocol = HOOK_NATIVE_PROTOCOL.get(platform)
        if protocol is None:
            raise LLMError(f"{platform} has no CLI to run maintenance natively; set a provider for the task")
        return LLMSettings(protocol, model or NATIVE_MODELS.get(platform, ""))

    return make


def output_path(raw: str, project: Path, mem_root: Path) -> Path:
    """Where a task writes: *raw* (``.memsearch/…`` is in *mem_root*, other relative
    paths in *project*), only when its folder lies inside *mem_root*."""
    if raw.startswith(".memsearch/"):
        path = mem_root / raw[len(".memsearch/") :]
    else:
        path = Path(raw).expanduser()
        path = path if path.is_absolute() else project / path
    folder = Path(os.path.realpath(path.parent))
    if not path.name or path.name in (".", "..") or not is_inside(folder, mem_root):
        raise UnsafePathError(f"{raw!r} is outside the project's memory folder {mem_root}; refusing to write it")
    return folder / path.name


def _existing(path: Path) -> str:
    """The file's text; a link or anything but a regular file counts as empty (it is replaced)."""
    try:
        data = store.read_regular(path)
    except (store.SkillError, OSError):
        return ""
    return data.decode("utf-8", "replace") if data else ""


def build_prompt(template: str, values: dict[str, str], existing: str, input_dir: Path, digest: str) -> str:
    """The task's instructions, the file as it is, the newest journals and the input's digest."""
    for name, value in values.items():
        template = template.replace("{{" + name + "}}", value)
    budget = max(0, MAX_PROMPT_CHARS - len(template) - len(existing) - 512)
    journals = distill.recent_journals(input_dir, budget)
    prompt = (
        f"{template.rstrip()}\n\n## Existing output file\n\n```markdown\n{existing.strip()}\n```\n\n"
        f"## Recent memory journal entries\n\n```markdown\n{journals.strip()}\n```\n\n"
        f"## Changed input digest\n\n{digest}\n"
    )
    if len(prompt) > MAX_PROMPT_CHARS:
        prompt = prompt[:MAX_PROMPT_CHARS] + "\n\n[truncated]\n"
    return prompt


def parse_answer(task: str, raw: str) -> tuple[str, str, str]:
    """(action, reason, content) of an answer; :class:`LLMError` unless it is the expected JSON."""
    data = distill.json_object(raw.strip(), "action")
    if data is None:
        raise LLMError(f"{task}: the LLM did not answer with a JSON object: {one_line(raw, 120)}")
    action = data.get("action")
    if action not in ("none", "replace"):
        raise LLMError(f"{task}: the LLM's action must be 'none' or 'replace', not {one_line(repr(action), 40)}")
    reason = data.get("reason")
    content = data.get("content")
    content = content.strip() if isinstance(content, str) else ""
    if action == "replace" and not content:
        raise LLMError(f"{task}: the LLM answered 'replace' without content")
    return action, reason if isinstance(reason, str) else "", content


def _call(settings: LLMSettings, prompt: str) -> str:
    if settings.timeout is None:
        settings = dataclasses.replace(settings, timeout=distill.LLM_TIMEOUT)
    return get_llm(settings).complete(prompt)


def run_task(
    cfg: Settings,
    platform: str,
    task: str,
    project: Path,
    mem_root: Path,
    *,
    force: bool = False,
    complete: Complete | None = None,
) -> TaskResult:
    """One file task, when due; raises (after recording the failure in the state) when it fails."""
    table = getattr(cfg.plugins[platform], task)
    where = f"plugins.{platform}.{task}"
    raw_input = resolve_env(table.input_dir, f"{where}.input_dir")
    input_dir = distill.resolve_task_path(raw_input or str(mem_root / "memory"), project, mem_root)
    output = output_path(resolve_env(table.output_file, f"{where}.output_file"), project, mem_root)
    state_path = mem_root / ".maintenance-state.json"
    key = f"{platform}.{task}"
    digest = distill.input_digest(input_dir)
    previous = distill.load_state(state_path).get(key)
    previous = previous if isinstance(previous, dict) else {}
    due, reason = distill.is_due(table.min_interval_hours, previous, digest, force)
    if not due:
        return TaskResult(task, "skip", reason, str(output))
    if not distill.journal_files(input_dir):
        return TaskResult(task, "skip", f"no memory journals in {input_dir}", str(output))
    with distill.task_lock(mem_root / f".maintenance-{platform}-{task}.lock") as locked:
        if not locked:
            return TaskResult(task, "locked", "", str(output))
        try:
            settings = routing.route(cfg, platform, task, native(platform))
            values = {
                "AGENT_NAME": platform,
                "TASK_NAME": task,
                "PROJECT_DIR": str(project),
                "INPUT_DIR": str(input_dir),
                "OUTPUT_FILE": str(output),
            }
            template = prompts.configured(cfg, task)
            prompt = build_prompt(template, values, _existing(output), input_dir, digest)
            action, why, content = parse_answer(task, (complete or _call)(settings, prompt))
            if action == "replace":
                store.make_private_dir(output.parent)
                store.write_atomic(output, (content.rstrip() + "\n").encode("utf-8"), 0o644)
            stamp = store.now()
            entry = {
                "last_checked_at": stamp,
                "last_success_at": stamp,
                "last_input_digest": digest,
                "last_action": action,
                "output_file": str(output),
            }
            distill.save_entry(state_path, key, entry)
        except Exception as exc:
            _record_failure(state_path, key, digest, output, exc)
            raise
    return TaskResult(task, action, why, str(output))


def _record_failure(state_path: Path, key: str, digest: str, output: Path, exc: BaseException) -> None:
    distill.record_failure(state_path, key, digest, output, f"{type(exc).__name__}: {one_line(str(exc), 1900)}")


def run_all(
    cfg: Settings,
    platform: str,
    project: Path,
    mem_root: Path,
    *,
    force: bool = False,
    complete: Complete | None = None,
) -> list[str]:
    """Every enabled task, each on its own (one failing does not stop the others); one line per task."""
    lines = []
    for task in enabled_tasks(cfg, platform):
        try:
            if task == distill.TASK:
                done = distill.distill(
                    cfg,
                    platform,
                    project_dir=project,
                    memsearch_dir=mem_root,
                    force=force,
                    require_enabled=True,
                    complete=complete,
                    native=native(platform),
                )
                detail = ", ".join([*done.created, *done.updated]) or done.reason
                lines.append(f"{task}: {done.action}" + (f" ({detail})" if detail else ""))
            else:
                result = run_task(cfg, platform, task, project, mem_root, force=force, complete=complete)
                lines.append(f"{task}: {result.action}" + (f" ({result.reason})" if result.reason else ""))
        except Exception as exc:  # noqa: BLE001 - recorded in the state; the next task still runs
            lines.append(f"{task}: failed: {one_line(str(exc), 300)}")
    return lines


def save_job(platform: str, project_dir: str, memsearch_dir: str) -> Path:
    """The worker's job file, in the project's ``jobs`` folder."""
    import tempfile

    folder = Path(memsearch_dir) / "jobs"
    folder.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix="maintain-", suffix=".json", dir=folder)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump({"platform": platform, "project_dir": project_dir, "memsearch_dir": memsearch_dir}, f)
    return Path(name)


def run(job_file: Path) -> int:
    """The detached worker: the job's enabled tasks; reports only to ``hooks.log``."""
    from memsearch_fast import config as cfgmod

    try:
        job = json.loads(job_file.read_text("utf-8"))
        platform, project_dir, memsearch_dir = (str(job[k]) for k in ("platform", "project_dir", "memsearch_dir"))
    except (OSError, ValueError, TypeError, KeyError) as exc:
        log_error(None, f"maintenance: unreadable job {job_file}: {exc}")
        return 1
    finally:
        job_file.unlink(missing_ok=True)
    try:
        if os.path.isdir(project_dir):
            os.chdir(project_dir)  # the project's .memsearch.toml applies
        cfg = cfgmod.resolve(resolve_env=False)
    except Exception as exc:  # noqa: BLE001 - reported to the log, never to the agent
        log_error(Path(memsearch_dir), f"maintenance: {exc}")
        return 1
    return run_logged(cfg, platform, project_dir, memsearch_dir)


def run_logged(cfg: Settings, platform: str, project_dir: str, memsearch_dir: str) -> int:
    """:func:`run_all` for a worker: every outcome a line in ``hooks.log``, nothing raised."""
    from memsearch_fast.agents.project import check_folder

    where = Path(memsearch_dir)
    try:
        check_folder(memsearch_dir)  # as the hook found it: no link has appeared since
        lines = run_all(cfg, platform, Path(project_dir), where.resolve())
    except Exception as exc:  # noqa: BLE001 - reported to the log, never to the agent
        log_error(where, f"maintenance: {exc}")
        return 1
    for text in lines:
        (log_error if ": failed: " in text else log_info)(where, f"maintenance {text}")
    return 0
