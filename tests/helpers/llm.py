"""A local HTTP server that speaks the LLM protocols, and fake `claude` / `codex` executables."""

from __future__ import annotations

import json
import stat
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

KEY = "sk-test-SECRET-0123456789abcdef"

# (status, headers, body): a body that is not bytes is sent as JSON.
Reply = tuple[int, dict[str, str], Any]


class FakeLLMServer:
    """Speaks OpenAI chat completions (``/v1/chat/completions``), Anthropic
    Messages (``/v1/messages``) and Ollama (``/api/chat``).

    The answer text is ``answer``; ``faults`` are replies used, in order,
    before any normal one; every request is recorded.
    """

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.faults: list[Reply] = []
        self.answer = "- User asked for a summary.\n- The agent wrote it."
        self.delay = 0.0
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(length) or b"{}")
                headers = {k.lower(): v for k, v in self.headers.items()}
                with server.lock:
                    server.requests.append({"path": self.path, "headers": headers, "body": body})
                    fault = server.faults.pop(0) if server.faults else None
                if server.delay:
                    time.sleep(server.delay)
                if fault is not None:
                    return self.reply(*fault)
                return self.reply(*server.respond(self.path, headers, body))

            def reply(self, status: int, headers: dict[str, str], payload: Any) -> None:
                data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", headers.pop("Content-Type", "application/json"))
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def respond(self, path: str, headers: dict[str, str], body: dict[str, Any]) -> Reply:
        if path == "/v1/chat/completions":
            if headers.get("authorization") != f"Bearer {KEY}":
                # Some servers echo the key they got; the client must not repeat it.
                return 401, {}, {"error": {"message": f"Incorrect API key provided: {headers.get('authorization')}"}}
            message = {"role": "assistant", "content": self.answer, "refusal": None}
            return 200, {}, {"choices": [{"index": 0, "message": message, "finish_reason": "stop"}]}
        if path == "/v1/messages":
            if headers.get("x-api-key") != KEY or headers.get("anthropic-version") != "2023-06-01":
                return 401, {}, {"type": "error", "error": {"type": "authentication_error", "message": "bad key"}}
            content = [
                {"type": "thinking", "thinking": "Let me think.", "signature": "x"},
                {"type": "text", "text": self.answer},
            ]
            return 200, {}, {"type": "message", "content": content, "stop_reason": "end_turn"}
        if path == "/api/chat":
            assert body.get("stream") is False
            return 200, {}, {"message": {"role": "assistant", "content": self.answer}, "done": True}
        return 404, {}, {"error": "no such endpoint"}

    def prompts(self) -> list[str]:
        """The user message of each request."""
        return [r["body"]["messages"][0]["content"] for r in self.requests]

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


FAKE_AGENT = """\
import json, os, subprocess, sys, time
if sys.argv[1:] == ["--help"]:
    with open(os.environ["FAKE_AGENT_LOG"] + ".help", "a", encoding="utf-8") as log:
        log.write("--help\\n")
    print("Usage: claude [options]\\n  -p, --print  print the answer and exit")
    if os.environ.get("FAKE_CLAUDE_SAFE_MODE") == "1":
        print("  --safe-mode  start without user settings, plugins, hooks or MCP servers")
    sys.exit(0)
prompt = sys.stdin.read()
name = os.path.basename(sys.argv[0])
with open(os.environ["FAKE_AGENT_LOG"], "a", encoding="utf-8") as log:
    log.write(json.dumps({"name": name, "argv": sys.argv[1:], "stdin": prompt,
                          "env": {k: os.environ.get(k) for k in ("MEMSEARCH_DISABLE", "MEMSEARCH_NO_WATCH",
                                  "MEMSEARCH_IN_STOP_WORKER", "CLAUDECODE")}}) + "\\n")
mode = os.environ.get("FAKE_AGENT_MODE", "ok")
if mode == "ok":
    print("- User asked " + name + " for notes.\\n- It wrote them.")
elif mode == "credit":
    print("Credit balance is too low")
elif mode == "empty":
    pass
elif mode == "fail":
    print("starting", flush=True)
    sys.stderr.write("\\nerror: not logged in\\nmore detail\\n")
    sys.exit(3)
elif mode == "hang":
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    with open(os.environ["FAKE_AGENT_LOG"] + ".child", "w") as f:
        f.write(str(child.pid))
    time.sleep(60)
"""


def fake_agents(directory: Path) -> Path:
    """``claude`` and ``codex`` executables in *directory* (put it first on PATH).

    They record argv, stdin and a few variables as JSON lines in
    ``$FAKE_AGENT_LOG`` and answer as ``$FAKE_AGENT_MODE`` says; ``--help``
    is counted in ``$FAKE_AGENT_LOG.help`` and lists ``--safe-mode`` when
    ``$FAKE_CLAUDE_SAFE_MODE`` is 1.
    """
    directory.mkdir(parents=True, exist_ok=True)
    for name in ("claude", "codex"):
        path = directory / name
        path.write_text(f"#!{sys.executable}\n{FAKE_AGENT}", encoding="utf-8")
        path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return directory


def calls(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]
