"""The host agent's own CLI as the model: ``claude -p`` (Claude Code),
``codex exec`` (Codex), ``opencode run`` (OpenCode) and ``openclaw agent
--local`` (OpenClaw), with the flags the reference's plugins use
(``--safe-mode`` where the ``claude`` CLI has it).

The prompt goes on stdin (no argv length limit) and the answer is what the
CLI prints on stdout. The child runs in its own session with the variables
that keep memsearch's hooks from running inside it (no recursion), and its
whole process group is killed on timeout. No retries: the CLIs retry their
own API calls. ``base_url`` and ``api_key`` do not apply (the CLI uses its
own login).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
from pathlib import Path

from memsearch_fast.config import environment
from memsearch_fast.errors import one_line
from memsearch_fast.llm.base import LLM, LLMError


class NativeAgent(LLM):
    program = ""
    default_timeout = 110.0  # the reference's hook timeout
    #: Variables set for the child (memsearch hooks read them and stand down).
    child_env: tuple[tuple[str, str], ...] = (("MEMSEARCH_NO_WATCH", "1"),)
    #: Variables removed for the child.
    child_unset: tuple[str, ...] = ()
    #: Whether the prompt goes on stdin (else :meth:`_argv` puts it in the arguments).
    prompt_on_stdin = True

    def _argv(self, exe: str, prompt: str) -> list[str]:
        raise NotImplementedError

    def _answer(self, out: str) -> str:
        """The notes in what the CLI printed."""
        return out

    def _place(self, env: dict[str, str]) -> tuple[dict[str, str], str | None]:
        """The child's environment and working directory (None: this process's)."""
        return env, None

    def _complete(self, prompt: str) -> str:
        exe = shutil.which(self.program)
        if exe is None:
            raise LLMError(f"{self.program!r} is not on PATH; install it or set plugins.<platform>.summarize.provider")
        env = {k: v for k, v in os.environ.items() if k not in self.child_unset}
        env.update(self.child_env)
        env, cwd = self._place(env)
        proc = subprocess.Popen(
            [exe, *self._argv(exe, prompt)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd=cwd,
            start_new_session=True,  # its own process group, killed as one
        )
        try:
            given = prompt if self.prompt_on_stdin else ""
            out, err = proc.communicate(given.encode("utf-8", "replace"), timeout=self.timeout)
        except subprocess.TimeoutExpired:
            _kill(proc)
            raise LLMError(f"{self.kind} ({self.model}) timed out after {self.timeout:g}s") from None
        except BaseException:
            _kill(proc)
            raise
        if proc.returncode != 0:
            text = err.decode("utf-8", "replace").strip() or out.decode("utf-8", "replace").strip()
            detail = next((line for line in text.splitlines() if line.strip()), "")
            raise LLMError(
                f"{self.kind} ({self.model}) exited with status {proc.returncode}"
                + (f": {one_line(detail, 200)}" if detail else "")
            )
        return self._answer(out.decode("utf-8", "replace"))


def _kill(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()
    # A descendant that left the group may still hold the pipes: do not wait for it.
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.communicate(timeout=5)


#: What a ``claude`` executable's ``--help`` says it supports, by its path and stamp.
_HELP_CACHE = Path("~/.memsearch/cache/claude-flags.json")


def claude_has_safe_mode(exe: str) -> bool:
    """Whether this ``claude`` takes ``--safe-mode`` (no user CLAUDE.md, skills, plugins' hooks or
    MCP servers in the nested session). Read from its ``--help`` once per installed binary and
    kept on disk; False (the older CLI's flags alone) when that cannot be told."""
    try:
        st = os.stat(exe)
    except OSError:
        return False
    stamp = f"{st.st_mtime_ns}:{st.st_size}"
    cache = _HELP_CACHE.expanduser()
    try:
        known = json.loads(cache.read_text("utf-8"))
    except (OSError, ValueError):
        known = {}
    known = known if isinstance(known, dict) else {}
    entry = known.get(exe)
    if isinstance(entry, dict) and entry.get("stamp") == stamp:
        return entry.get("safe_mode") is True
    try:
        done = subprocess.run(
            [exe, "--help"],
            check=False,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=10,
            start_new_session=True,
        )
        helped = done.stdout + done.stderr
    except (OSError, subprocess.SubprocessError):
        return False  # not cached: the next run asks again
    safe = b"--safe-mode" in helped
    known[exe] = {"stamp": stamp, "safe_mode": safe}
    with contextlib.suppress(OSError):
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_name(f"{cache.name}.{os.getpid()}")
        tmp.write_text(json.dumps(known), "utf-8")
        os.replace(tmp, cache)
    return safe


class ClaudeCode(NativeAgent):
    """``claude -p`` without MCP servers, browser or a saved session, and in safe mode (without
    the user's own setup) where the CLI has it. No tools, except Bash limited to the commands
    the settings name (``Bash(memsearch transcript:*)``), as the reference opens for skills."""

    kind = "claude -p"
    program = "claude"
    child_env = (("MEMSEARCH_NO_WATCH", "1"), ("MEMSEARCH_DISABLE", "1"))
    child_unset = ("CLAUDECODE",)  # else claude refuses to start inside a Claude Code session

    def _argv(self, exe: str, prompt: str) -> list[str]:
        return [
            "-p",
            *(["--safe-mode"] if claude_has_safe_mode(exe) else []),
            "--strict-mcp-config",
            *self._tools(),
            "--model",
            self.model,
            "--no-session-persistence",
            "--no-chrome",
        ]

    def _tools(self) -> list[str]:
        commands = self.settings.tools
        if not commands:
            return ["--tools", ""]
        return ["--tools", "Bash", "--allowed-tools", " ".join(f"Bash({c}:*)" for c in commands)]


class CodexExec(NativeAgent):
    """``codex exec`` read-only, ephemeral, hooks off, low reasoning effort, in the profile
    ``MEMSEARCH_CODEX_PROFILE`` names (``-p``, as memsearch 0.4's maintenance runner passes it);
    prompt on stdin (``-``)."""

    kind = "codex exec"
    program = "codex"
    child_env = (("MEMSEARCH_NO_WATCH", "1"), ("MEMSEARCH_IN_STOP_WORKER", "1"))

    def _argv(self, exe: str, prompt: str) -> list[str]:
        return [
            "exec",
            "--ephemeral",
            "--skip-git-repo-check",
            "-s",
            "read-only",
            "-c",
            "features.hooks=false",
            "-c",
            'model_reasoning_effort="low"',
            *(["-p", profile] if (profile := environment.text("MEMSEARCH_CODEX_PROFILE").strip()) else []),
            "-m",
            self.model,
            "-",
        ]


class OpenCodeRun(NativeAgent):
    """``opencode run`` (OpenCode's configured provider; ``-m provider/model`` when a model is set),
    with the user's models and none of their plugins or the project's config (:mod:`.opencode`).
    The prompt is its message argument; memsearch's plugin stands down inside it."""

    kind = "opencode run"
    program = "opencode"
    child_env = (("MEMSEARCH_NO_WATCH", "1"), ("MEMSEARCH_DISABLE", "1"))
    prompt_on_stdin = False

    def _argv(self, exe: str, prompt: str) -> list[str]:
        return ["run", *(["-m", self.model] if self.model else []), prompt]

    def _place(self, env: dict[str, str]) -> tuple[dict[str, str], str | None]:
        from memsearch_fast.llm import opencode

        env, root = opencode.isolated(env)
        return env, str(root)


class OpenClawAgent(NativeAgent):
    """``openclaw agent --local`` in a session of its own (``--model`` when a model is set); the
    plugins' loading lines it prints before the answer are dropped."""

    kind = "openclaw agent"
    program = "openclaw"
    child_env = (("MEMSEARCH_NO_WATCH", "1"), ("MEMSEARCH_DISABLE", "1"))
    prompt_on_stdin = False

    def _argv(self, exe: str, prompt: str) -> list[str]:
        model = ["--model", self.model] if self.model else []
        return ["agent", "--local", "--session-id", "memsearch-summarize", *model, "-m", prompt]

    def _answer(self, out: str) -> str:
        return "\n".join(line for line in out.splitlines() if not line.startswith(("[plugins]", "[agents]")))
