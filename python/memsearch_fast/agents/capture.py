"""The background half of Stop and PreCompact: summarize a turn, append it to
today's log, index that log.

It runs detached from the agent (the hook has already answered), reads its
job from a file the hook wrote, and reports only to ``.memsearch/hooks.log``.
Only bullet notes become memory: an LLM error, a rate-limit message, an empty
or bullet-less answer leaves at most a one-line marker under the turn's
anchor (when the anchor names a transcript, so the turn stays reachable
through ``transcript``), never the answer or the raw turn. For Codex, which
has no SessionEnd event, the enabled maintenance tasks follow (:mod:`.maintain`).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from memsearch_fast.agents import journal
from memsearch_fast.agents.log import log_error, log_info
from memsearch_fast.agents.project import check_folder
from memsearch_fast.recall.search import plural

if TYPE_CHECKING:
    from memsearch_fast.config.settings import Settings

#: The summarizer's own deadline (seconds), under the agents' 120 s hook timeout.
DEFAULT_TIMEOUT_S = 100.0
MARKER = "- Turn not summarized; its transcript is linked above."
#: Platforms without a SessionEnd event: their maintenance (:mod:`.maintain`) follows a capture.
NO_SESSION_END = ("codex",)
_BULLET = re.compile(r"^\s*(?:[-*•]|\d+[.)])\s+(.*\S)\s*$")


@dataclass(frozen=True)
class Job:
    platform: str
    event: str  # "stop" or "pre-compact"
    memsearch_dir: str
    memory_dir: str
    collection: str
    project_dir: str
    session: str
    turn: str
    transcript: str
    text: str
    date: str  # YYYY-MM-DD, when the turn ended
    now: str  # HH:MM
    anchor_kind: str = "transcript"  # "db": *transcript* is the host's session database
    #: The turn a PreCompact's entry is anchored to when it covered this turn: the notes go there.
    into: str = ""

    def save(self, folder: Path) -> Path:
        import tempfile

        folder.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix="capture-", suffix=".json", dir=folder)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(asdict(self), f)
        return Path(name)

    @classmethod
    def load(cls, path: Path) -> Job:
        data = json.loads(path.read_text("utf-8"))
        return cls(**{k: str(data.get(k, "")) for k in cls.__dataclass_fields__})


def bullets(answer: str) -> list[str]:
    """The answer's bullet lines as ``- …``; other lines (preambles, blank) are dropped."""
    out = []
    for line in answer.splitlines():
        m = _BULLET.match(line)
        if m:
            out.append(f"- {m.group(1)}")
    return out


def _timeout() -> float:
    from memsearch_fast.config import environment

    return environment.number("MEMSEARCH_SUMMARIZE_TIMEOUT", DEFAULT_TIMEOUT_S)


def summarize(cfg: Settings, job: Job) -> list[str]:
    """The notes for the job's text; raises :class:`LLMError` when there are none."""
    import dataclasses

    from memsearch_fast.agents import summarize as notes
    from memsearch_fast.llm import LLMError

    settings = dataclasses.replace(notes.route(cfg, job.platform, hook=True), timeout=_timeout())
    instructions = notes.load_prompt(cfg, notes.AGENT_NAMES[job.platform])
    answer = notes.summarize(settings, instructions, job.text)
    found = bullets(answer)
    if not found:
        raise LLMError(f"{settings.protocol} answered without bullet notes")
    return found


def run(job_file: Path) -> int:
    """Do one job; the exit status (0 also when the turn could not be summarized)."""
    from memsearch_fast import config as cfgmod

    try:
        job = Job.load(job_file)
    except (OSError, ValueError, TypeError) as exc:
        log_error(None, f"capture: unreadable job {job_file}: {exc}")
        return 1
    finally:
        job_file.unlink(missing_ok=True)
    where = Path(job.memsearch_dir)
    if job.project_dir and os.path.isdir(job.project_dir):
        os.chdir(job.project_dir)  # the project's .memsearch.toml applies
    try:
        cfg = cfgmod.resolve(resolve_env=False)
        if not cfg.plugins[job.platform].summarize.enabled:
            return 0
    except Exception as exc:  # noqa: BLE001 - reported to the log, never to the agent
        log_error(where, f"capture: configuration: {exc}")
        return 1
    from memsearch_fast.agents.summarize import NativeSummarization

    try:
        notes = summarize(cfg, job)
    except NativeSummarization:
        # Not a failure: nothing summarizes for this platform until a provider is set.
        log_info(
            where,
            f"nothing captured of session {job.session}: set plugins.{job.platform}.summarize.provider "
            "to an LLM provider to capture turns",
        )
        return 0
    except Exception as exc:  # noqa: BLE001 - any failure means: no notes
        log_error(where, f"capture ({job.event}, session {job.session}): summary failed: {exc}")
        if not job.transcript:
            log_info(where, f"nothing captured of session {job.session}: no notes and no transcript to link")
            return 0
        notes = [MARKER]
    log = Path(job.memory_dir) / f"{job.date}.md"
    try:
        check_folder(job.memsearch_dir)  # as SessionStart found it: no link has appeared since
        anchor = journal.Anchor(job.session, job.turn, job.transcript, job.anchor_kind or "transcript")
        if job.into:
            journal.merge(log, job.now, anchor, notes, into=job.into)
        else:
            journal.append(log, job.now, anchor, notes)
    except OSError as exc:
        log_error(where, f"capture: cannot append to {log}: {exc}")
        return 1
    code = index(where, job, log)
    if job.platform in NO_SESSION_END:
        from memsearch_fast.agents import maintain

        if maintain.enabled_tasks(cfg, job.platform):
            maintain.run_logged(cfg, job.platform, job.project_dir, job.memsearch_dir)
    return code


def index(where: Path, job: Job, log: Path) -> int:
    """Index the log just written (the watcher may also; the second run finds it unchanged)."""
    from memsearch_fast import config as cfgmod
    from memsearch_fast.api import MemSearch

    try:
        cfg = cfgmod.resolve({"milvus.collection": job.collection})
        with MemSearch.from_config(cfg, [job.memory_dir]) as ms:
            count = asyncio.run(ms.index_file(log))
    except Exception as exc:  # noqa: BLE001 - the entry is written; the watcher or next run indexes it
        log_error(where, f"capture: indexing {log} failed: {exc}")
        return 1
    log_info(where, f"captured {job.event} of session {job.session} into {log.name} ({plural(count, 'chunk')} indexed)")
    return 0
