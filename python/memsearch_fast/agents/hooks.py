"""The hook events: agent JSON in, agent JSON out, nothing ever in the way.

Every event answers with exit status 0 and one JSON object, whatever goes
wrong (a broken configuration becomes a one-line status on SessionStart;
everything else goes to ``.memsearch/hooks.log``). ``MEMSEARCH_DISABLE=1``
makes every event answer ``{}`` and touch nothing: the summarizer's own
``claude -p`` runs with it, so our hooks never fire inside it.

SessionStart stays on a short path: no network (but a 0.3 s reachability
check of a remote Milvus), no model, no second CLI start; the memory root is
registered with the database's service (or a watcher started detached), and
later events renew that lease. Stop and PreCompact read the turn at once (Codex may delete
its rollout once the hook returns) and leave the summary to a detached
worker (:mod:`.capture`); SessionEnd leaves its enabled maintenance
(PROJECT.md, USER.md, skill candidates) to another (:mod:`.maintain`).
"""

from __future__ import annotations

import json
import os
import select
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memsearch_fast import __version__
from memsearch_fast.agents import claims, journal
from memsearch_fast.agents.log import log_error
from memsearch_fast.agents.project import Project, guard, is_absolute, locate
from memsearch_fast.config import environment
from memsearch_fast.errors import MemsearchError

if TYPE_CHECKING:
    from memsearch_fast.config.settings import Settings

PLATFORMS = ("claude-code", "codex", "opencode", "openclaw")
EVENTS = ("session-start", "user-prompt", "stop", "pre-compact", "session-end", "locate")
#: The detached workers the events start (``--job FILE``).
WORKERS = ("capture", "maintain")
#: ``plugins.<platform>.<task>`` switches whose task SessionEnd starts (:data:`.maintain.ALL_TASKS`).
MAINTENANCE_TASKS = ("project_review", "user_profile", "memory_to_skill")
#: How long a hook waits for its stdin to close (some agents never close it).
STDIN_DEADLINE_S = 2.0
STDIN_MAX_BYTES = 8 << 20
MIN_PROMPT_CHARS = 10
#: Each event gives up before the agent's own timeout would kill it (seconds;
#: the plugins' timeouts: SessionStart 10, UserPromptSubmit 5, the others 30).
#: ``MEMSEARCH_HOOK_DEADLINE`` overrides them all.
DEADLINES_S = {"session-start": 8.0, "user-prompt": 4.0, "stop": 25.0, "pre-compact": 25.0}
DEFAULT_DEADLINE_S = 8.0
#: A session whose transcript has fewer lines has nothing worth keeping.
MIN_TRANSCRIPT_LINES = 3
Output = dict[str, Any]


def disabled() -> bool:
    return environment.flag("MEMSEARCH_DISABLE") or environment.flag("MEMSEARCH_IN_STOP_WORKER")


def read_payload(fd: int = 0, deadline_s: float = STDIN_DEADLINE_S) -> dict[str, Any]:
    """The JSON object on stdin, read until it is complete, EOF or the deadline; {} when there is none.

    A host may leave stdin open after writing its event: once what arrived parses
    as one object, nothing more is waited for.
    """
    if os.isatty(fd):
        return {}
    chunks: list[bytes] = []
    size = 0
    end = time.monotonic() + deadline_s
    try:
        while size < STDIN_MAX_BYTES:
            left = end - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                break
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
            if chunk.rstrip().endswith(b"}") and _parse(chunks) is not None:
                break
    except (OSError, ValueError):
        pass
    return _parse(chunks) or {}


def _parse(chunks: list[bytes]) -> dict[str, Any] | None:
    """The object *chunks* hold, or None (incomplete, not JSON, not an object)."""
    try:
        value = json.loads(b"".join(chunks).decode("utf-8", "replace") or "{}")
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _str(payload: Mapping[str, Any], key: str) -> str:
    value = payload.get(key)
    return value if isinstance(value, str) else ""


def project_of(payload: Mapping[str, Any]) -> Project:
    cwd = _str(payload, "cwd")
    return locate(cwd if cwd and is_absolute(cwd) else None)


def _config() -> Settings:
    from memsearch_fast import config as cfgmod

    return cfgmod.resolve(resolve_env=False)


def _uri(cfg: Settings) -> str:
    """The database the hooks use: memsearch 0.4.23's at the default path is
    left as it is and the index goes beside it (lite.fallback)."""
    from memsearch_fast.config.schema import resolve_env_ref
    from memsearch_fast.lite.fallback import effective_uri

    return effective_uri(str(resolve_env_ref(cfg.milvus.uri, "milvus.uri")))


# -- the events ---------------------------------------------------------------------------


def session_start(platform: str, payload: Mapping[str, Any], project: Project) -> Output:
    from memsearch_fast.agents import status, watcher

    cfg = _config()
    emb = cfg.embedding
    uri = _uri(cfg)
    line = f"[memsearch v{__version__}] embedding: {status.embedding(emb)} | milvus: {uri}"
    line += f" | collection: {project.collection}"
    from memsearch_fast.agents import update

    note = update.hint(__version__)  # local files only; a configured index is asked in the background
    line += f" | {note}" if note else ""
    problem = status.key_problem(emb) or status.milvus_problem(uri)
    if problem:
        return {"systemMessage": f"{line} | ERROR: {problem}"}
    if uri != str(cfg.milvus.uri):
        from memsearch_fast.lite.fallback import tell_once

        note = tell_once("hook")
        line += f" | {note}" if note else ""
    if platform == "claude-code":
        from memsearch_fast.agents import legacy

        note = legacy.tell_once(project.project_dir)
        line += f" | {note}" if note else ""
    memory = Path(project.memory_dir)
    memory.mkdir(parents=True, exist_ok=True)
    session = _str(payload, "session_id")
    if session:
        watcher.join(project, session)
    if _watching():
        watcher.start(uri, project, Path(project.memsearch_dir) / "watch.log", cfg=cfg, session=session)
    out: Output = {"systemMessage": line}
    context = journal.recent_context(memory)
    if context:
        context += (
            f'\nOlder memory: `memsearch search "<query>" --collection {project.collection}`, '
            "then `memsearch expand <chunk_hash>` and `memsearch transcript <path> --turn <id>`.\n"
        )
        out["hookSpecificOutput"] = {"hookEventName": "SessionStart", "additionalContext": context}
    return out


def _watching() -> bool:
    return not environment.flag("MEMSEARCH_NO_WATCH")


def _renew(payload: Mapping[str, Any], project: Project) -> None:
    """The session's lease on its memory root lives on (taken again after the service restarted)."""
    if not _watching() or not os.path.isdir(project.memory_dir):
        return
    from memsearch_fast.agents import watcher

    try:
        if not watcher.renew_due(project, _str(payload, "session_id") or "unknown"):
            return
        watcher.renew(_config(), project, _str(payload, "session_id"), Path(project.memsearch_dir) / "watch.log")
    except Exception as exc:  # noqa: BLE001 - the event's own answer must not depend on it
        log_error(Path(project.memsearch_dir), f"renewing the watch lease: {exc}")


def user_prompt(platform: str, payload: Mapping[str, Any], project: Project) -> Output:
    _renew(payload, project)
    if len(_str(payload, "prompt").strip()) < MIN_PROMPT_CHARS:
        return {}
    if not os.path.isdir(project.memory_dir):
        return {}
    return {"systemMessage": "[memsearch] Memory available"}


def stop(platform: str, payload: Mapping[str, Any], project: Project) -> Output:
    _renew(payload, project)
    if payload.get("stop_hook_active") is True:
        return {}
    from memsearch_fast.agents import turns

    session = _str(payload, "session_id")
    transcript = _str(payload, "transcript_path")
    given = payload.get("turn")
    excerpt: turns.Excerpt | None = None
    kind = "transcript"
    if isinstance(given, dict) and isinstance(given.get("text"), str) and given["text"].strip():
        turn_id = given.get("id")
        excerpt = turns.Excerpt(turn_id if isinstance(turn_id, str) else "", given["text"][-turns.TEXT_CHARS :], 1)
        db = _str(payload, "db_path")  # OpenCode: its session database, where the turn is
        if not transcript and db and is_absolute(db) and os.path.isfile(db):
            transcript, kind = db, "db"
    elif transcript and os.path.isfile(transcript):
        if _short(transcript):
            return {}
        excerpt = turns.last_turn(transcript, _agent_name(platform))
    elif platform == "codex":
        excerpt = _codex_fallback(payload, session)
        transcript = ""
    if excerpt is None or not excerpt.text.strip():
        return {}
    if not excerpt.turn_id and _str(payload, "turn_id"):  # Codex names the turn it stops
        excerpt = excerpt._replace(turn_id=_str(payload, "turn_id"))
    if excerpt.turn_id and not claims.claim(project.memsearch_dir, session, excerpt.turn_id):
        return {}  # this turn's Stop already ran
    into = claims.compacted(project.memsearch_dir, session, excerpt.turn_id) if excerpt.turn_id else ""
    _spawn_capture(platform, "stop", project, session, excerpt, transcript, kind, into=into)
    return {}


class _Captured:
    """Turns in the log or claimed by their Stop, for :func:`.turns.uncaptured`."""

    def __init__(self, logged: set[str], memsearch_dir: str, session: str) -> None:
        self.logged, self.memsearch_dir, self.session = logged, memsearch_dir, session

    def __contains__(self, turn: object) -> bool:
        if turn in self.logged:
            return True
        return bool(self.session and turn) and claims.claimed(self.memsearch_dir, self.session, str(turn))


def pre_compact(platform: str, payload: Mapping[str, Any], project: Project) -> Output:
    from memsearch_fast.agents import turns

    session = _str(payload, "session_id")
    transcript = _str(payload, "transcript_path")
    if not (transcript and os.path.isfile(transcript)) or _short(transcript):
        return {}
    logged = journal.anchored_turns(Path(project.memory_dir), session) if session else set()
    # A turn whose Stop ran is its Stop's, though its notes may not be in the log yet
    # (written in the background: a compaction as the turn ends came before them).
    captured = _Captured(logged, project.memsearch_dir, session)
    excerpt = turns.uncaptured(transcript, _agent_name(platform), captured)
    if excerpt is not None and excerpt.text.strip():
        _spawn_capture(platform, "pre-compact", project, session, excerpt, transcript)
        if session and excerpt.last_id:  # the newest turn may still run: its Stop writes into this entry
            claims.mark_compacted(project.memsearch_dir, session, excerpt.last_id, excerpt.turn_id)
    return {}  # never blocks the compaction


def session_end(platform: str, payload: Mapping[str, Any], project: Project) -> Output:
    from memsearch_fast.agents import watcher

    session = _str(payload, "session_id")
    live = watcher.leave(project, session or "unknown")
    cfg = _config()
    if _watching():
        watcher.release(cfg, project, session)  # this session's lease; others keep the root watched
        if live == 0:
            watcher.stop(_uri(cfg), project)
    _maintain(platform, cfg, project)
    return {}


def _maintain(platform: str, cfg: Settings, project: Project) -> None:
    """PROJECT.md, USER.md and skill candidates, when enabled: in a detached worker (a model call)."""
    tables = cfg.plugins[platform]
    if not any(getattr(tables, task).enabled for task in MAINTENANCE_TASKS) or not os.path.isdir(project.memory_dir):
        return  # the usual case: nothing more is imported
    from memsearch_fast.agents import maintain

    _detach(platform, "maintain", maintain.save_job(platform, project.project_dir, project.memsearch_dir))


def locate_event(platform: str, payload: Mapping[str, Any], project: Project) -> Output:
    return {**project.as_json(), "milvus_uri": _uri(_config())}


HANDLERS: dict[str, Callable[[str, Mapping[str, Any], Project], Output]] = {
    "session-start": session_start,
    "user-prompt": user_prompt,
    "stop": stop,
    "pre-compact": pre_compact,
    "session-end": session_end,
    "locate": locate_event,
}


def _agent_name(platform: str) -> str:
    """What the notes call the agent (the summarizer's own table)."""
    from memsearch_fast.agents.summarize import AGENT_NAMES

    return AGENT_NAMES[platform]


def _short(path: str) -> bool:
    lines = 0
    try:
        with open(path, "rb") as f:
            while f.readline(1 << 20):  # lines are counted, never held whole
                lines += 1
                if lines >= MIN_TRANSCRIPT_LINES:
                    return False
    except OSError:
        return True
    return True


def _codex_fallback(payload: Mapping[str, Any], session: str) -> Any:
    """Codex without a rollout path: the session's last prompt from its history file
    and the final answer the hook was given."""
    from memsearch_fast.agents import turns

    answer = _str(payload, "last_assistant_message").strip()
    prompt = ""
    home = os.environ.get("CODEX_HOME") or os.path.join(os.path.expanduser("~"), ".codex")
    try:
        with open(os.path.join(home, "history.jsonl"), encoding="utf-8", errors="replace") as f:
            for line in f:
                try:
                    record = json.loads(line)
                except ValueError:
                    continue
                if isinstance(record, dict) and record.get("session_id") == session:
                    text = record.get("text")
                    if isinstance(text, str) and text.strip():
                        prompt = text.strip()
    except OSError:
        pass
    if not (prompt or answer):
        return None
    lines = [f"[User]: {prompt}"] if prompt else []
    lines += [f"[Codex]: {answer[: turns.MESSAGE_CHARS]}"] if answer else []
    return turns.Excerpt("", "\n".join(lines), 1)


def _spawn_capture(
    platform: str,
    event: str,
    project: Project,
    session: str,
    excerpt: Any,
    transcript: str,
    kind: str = "transcript",
    *,
    into: str = "",
) -> None:
    from memsearch_fast.agents.capture import Job

    now = time.localtime()
    job = Job(
        platform=platform,
        event=event,
        memsearch_dir=project.memsearch_dir,
        memory_dir=project.memory_dir,
        collection=project.collection,
        project_dir=project.project_dir,
        session=session,
        turn=excerpt.turn_id,
        transcript=transcript,
        text=excerpt.text,
        date=time.strftime("%Y-%m-%d", now),
        now=time.strftime("%H:%M", now),
        anchor_kind=kind,
        into=into,
    )
    _detach(platform, "capture", job.save(Path(project.memsearch_dir) / "jobs"))


def _detach(platform: str, worker: str, job: Path) -> None:
    """Start a worker (``capture``, ``maintain``) on *job*, detached: the hook does not wait for it."""
    import subprocess

    env = dict(os.environ, MEMSEARCH_NO_WATCH="1", PATH=worker_path(os.environ.get("PATH", "")))
    subprocess.Popen(
        [sys.executable, "-m", "memsearch_fast.agents.main", platform, worker, "--job", str(job)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
        start_new_session=True,  # the agent does not wait for it, and it outlives the hook
        close_fds=True,
    )


#: Where user-level installs put ``claude`` and ``codex``; an agent started from an IDE or a
#: desktop launcher may have none of them on PATH.
USER_BIN_DIRS = (
    "~/.local/bin",
    "~/bin",
    "~/.claude/local",
    "~/.npm-global/bin",
    "~/.bun/bin",
    "~/.volta/bin",
    "~/.cargo/bin",
    "/usr/local/bin",
    "/opt/homebrew/bin",
)


def worker_path(path: str) -> str:
    """*path* with the existing :data:`USER_BIN_DIRS` it lacks appended (its own order first)."""
    parts = [p for p in path.split(os.pathsep) if p]
    for entry in USER_BIN_DIRS:
        full = os.path.expanduser(entry)
        if full not in parts and os.path.isdir(full):
            parts.append(full)
    return os.pathsep.join(parts)


#: Codex events whose "nothing to do" is no output at all: Codex rejects ``{}`` from Stop,
#: and reads an empty stdout from PreCompact as a completed hook without a message.
SILENT_CODEX_EVENTS = ("stop", "pre-compact")


def answer(platform: str, event: str, output: Output) -> Output | None:
    """What the agent is shown; None: print nothing (:data:`SILENT_CODEX_EVENTS`)."""
    if platform == "codex" and event in SILENT_CODEX_EVENTS and not output:
        return None
    return output


class DeadlineExceeded(MemsearchError):
    def __str__(self) -> str:
        return "the hook ran out of time (MEMSEARCH_HOOK_DEADLINE)"


def _deadline(event: str) -> float:
    value = environment.number("MEMSEARCH_HOOK_DEADLINE")  # 0: each event's own
    return value if value > 0 else DEADLINES_S.get(event, DEFAULT_DEADLINE_S)


def _on_deadline(_signum: int, _frame: Any) -> None:
    raise DeadlineExceeded


def run(platform: str, event: str) -> Output | None:
    """One hook call: read stdin, run the event, never raise, never outlive the deadline."""
    import signal

    if disabled():
        return answer(platform, event, {})
    payload = read_payload()
    project: Project | None = None
    signal.signal(signal.SIGALRM, _on_deadline)
    signal.setitimer(signal.ITIMER_REAL, _deadline(event))
    try:
        project = guard(project_of(payload))  # a clone's .memsearch may not lead elsewhere
        return answer(platform, event, HANDLERS[event](platform, payload, project))
    except Exception as exc:  # noqa: BLE001 - a hook never fails the agent's session
        from memsearch_fast.errors import describe

        log_error(Path(project.memsearch_dir) if project else None, f"{platform} {event}: {describe(exc)}")
        if event == "session-start":
            return {"systemMessage": f"[memsearch] ERROR: {describe(exc)}"}
        return answer(platform, event, {})
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
