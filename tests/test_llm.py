"""The LLM layer against real HTTP servers on 127.0.0.1 that speak each protocol,
and fake `claude` / `codex` executables on PATH.

`FakeLLMServer` and `fake_agents` are shared with test_summarize.py.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memsearch_fast.llm import LLMError, LLMSettings, check_answer, get_llm
from tests.helpers.llm import KEY, FakeLLMServer, Reply, calls, fake_agents


@pytest.fixture
def server() -> Iterator[FakeLLMServer]:
    s = FakeLLMServer()
    yield s
    s.close()


@pytest.fixture(autouse=True)
def _no_provider_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (
        "OPENAI_API_KEY",
        "OPENAI_BASE_URL",
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_BASE_URL",
        "GEMINI_API_KEY",
        "GOOGLE_API_KEY",
        "OLLAMA_HOST",
    ):
        monkeypatch.delenv(name, raising=False)


def fast(protocol: str, **kw: Any) -> LLMSettings:
    """Settings whose retries wait a few milliseconds."""
    kw.setdefault("retry_base_delay", 0.01)
    kw.setdefault("retry_max_delay", 0.05)
    return LLMSettings(protocol, **kw)


# -- the protocols -----------------------------------------------------------------------


def test_openai_compatible(server: FakeLLMServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_LLM_KEY", KEY)
    llm = get_llm(fast("openai-compatible", model="m1", base_url=f"{server.url}/v1", api_key="env:MY_LLM_KEY"))
    assert llm.complete("notes please") == server.answer
    (request,) = server.requests
    assert request["body"] == {
        "model": "m1",
        "messages": [{"role": "user", "content": "notes please"}],
        "stream": False,
    }
    assert KEY not in repr(llm)

    # The key and server can come from OpenAI's own variables.
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("OPENAI_BASE_URL", f"{server.url}/v1/")
    assert get_llm(fast("openai")).complete("x") == server.answer
    assert server.requests[-1]["body"]["model"] == "gpt-5-mini"  # the reference's default


def test_anthropic_messages(server: FakeLLMServer, monkeypatch: pytest.MonkeyPatch) -> None:
    llm = get_llm(fast("anthropic", base_url=server.url, api_key=KEY))
    assert llm.complete("notes please") == server.answer  # the thinking block is skipped
    body = server.requests[-1]["body"]
    assert body["model"] == "claude-sonnet-4-6" and body["max_tokens"] > 0
    assert body["messages"] == [{"role": "user", "content": "notes please"}]
    # A base URL ending in /v1 and the key from $ANTHROPIC_API_KEY work too.
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    assert get_llm(fast("anthropic", model="claude-haiku-4-5", base_url=f"{server.url}/v1")).complete("x")
    assert server.requests[-1]["path"] == "/v1/messages"
    assert server.requests[-1]["body"]["model"] == "claude-haiku-4-5"


def test_ollama_chat(server: FakeLLMServer, monkeypatch: pytest.MonkeyPatch) -> None:
    server.answer = "<think>\nThe user wants notes.\n</think>\n\n- User asked for notes."
    monkeypatch.setenv("OLLAMA_HOST", server.url.removeprefix("http://"))  # no scheme, as Ollama allows
    assert get_llm(fast("ollama", model="qwen3")).complete("x") == "- User asked for notes."
    request = server.requests[-1]
    assert request["path"] == "/api/chat" and request["body"]["model"] == "qwen3"
    assert "authorization" not in request["headers"]


def test_gemini_uses_its_openai_compatible_endpoint(server: FakeLLMServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GEMINI_API_KEY", KEY)
    assert get_llm(fast("gemini", base_url=f"{server.url}/v1")).complete("x") == server.answer
    assert server.requests[-1]["body"]["model"] == "gemini-3-flash-preview"


# -- retries and errors ------------------------------------------------------------------


def test_rate_limits_and_overload_are_retried(server: FakeLLMServer) -> None:
    server.faults = [
        (429, {"Retry-After": "0"}, {"error": {"message": "Rate limit reached"}}),
        (529, {}, {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
        (502, {"Content-Type": "text/html"}, b"<html><body>Bad Gateway</body></html>"),
    ]
    llm = get_llm(fast("anthropic", base_url=server.url, api_key=KEY, max_retries=3))
    assert llm.complete("x") == server.answer
    assert len(server.requests) == 4


def test_retries_are_bounded(server: FakeLLMServer) -> None:
    server.faults = [(503, {}, {"error": {"message": "Service Unavailable"}})] * 10
    llm = get_llm(fast("openai", base_url=server.url + "/v1", api_key=KEY, max_retries=2))
    with pytest.raises(LLMError) as info:
        llm.complete("x")
    message = str(info.value)
    assert "\n" not in message and "HTTP 503" in message and "gave up after 3 attempts" in message
    assert info.value.status == 503 and len(server.requests) == 3


@pytest.mark.parametrize(
    ("reply", "needle"),
    [
        # Not worth retrying: one request, one line.
        (
            (400, {}, {"type": "error", "error": {"message": "Your credit balance is too low to access the API."}}),
            "credit balance is too low",
        ),
        ((404, {}, {"type": "error", "error": {"message": "model: nope"}}), "HTTP 404"),
        ((200, {"Content-Type": "text/html"}, b"<!DOCTYPE html><html><body>Sign in</body></html>"), "invalid JSON"),
        ((200, {}, {"type": "message", "content": [], "stop_reason": "refusal"}), "refused"),
        ((200, {}, {"type": "message", "content": [{"type": "text", "text": "  \n"}]}), "empty answer"),
        ((200, {}, {"content": "unexpected"}), "unexpected format"),
    ],
)
def test_errors_are_one_line_exceptions(server: FakeLLMServer, reply: Reply, needle: str) -> None:
    server.faults = [reply]
    llm = get_llm(fast("anthropic", base_url=server.url, api_key=KEY))
    with pytest.raises(LLMError) as info:
        llm.complete("x")
    assert needle in str(info.value) and "\n" not in str(info.value)
    assert len(server.requests) == 1


def test_the_key_never_appears_in_errors(server: FakeLLMServer) -> None:
    llm = get_llm(fast("openai", base_url=server.url + "/v1", api_key="sk-wrong-0123456789"))
    with pytest.raises(LLMError, match="rejected the API key") as info:
        llm.complete("x")
    assert "sk-wrong" not in str(info.value)
    server.faults = [(500, {}, {"error": {"message": f"upstream said: key {KEY} invalid"}})] * 3
    with pytest.raises(LLMError) as info:
        get_llm(fast("openai", base_url=server.url + "/v1", api_key=KEY)).complete("x")
    assert KEY not in str(info.value) and "***" in str(info.value)


def test_openai_refusals_and_filters(server: FakeLLMServer) -> None:
    llm = get_llm(fast("openai", base_url=server.url + "/v1", api_key=KEY))
    refusal = {"role": "assistant", "content": None, "refusal": "I can't help with that."}
    server.faults = [(200, {}, {"choices": [{"message": refusal, "finish_reason": "stop"}]})]
    with pytest.raises(LLMError, match="refused"):
        llm.complete("x")
    filtered = {"role": "assistant", "content": "- partial"}
    server.faults = [(200, {}, {"choices": [{"message": filtered, "finish_reason": "content_filter"}]})]
    with pytest.raises(LLMError, match="content filter"):
        llm.complete("x")


def test_timeouts(server: FakeLLMServer) -> None:
    server.delay = 2.0
    llm = get_llm(fast("ollama", base_url=server.url, timeout=0.3, max_retries=1))
    start = time.monotonic()
    with pytest.raises(LLMError, match=r"cannot reach .*gave up after 2 attempts"):
        llm.complete("x")
    assert time.monotonic() - start < 2.0


def test_configuration_errors_need_no_server(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(LLMError, match=r"needs an API key: set \$ANTHROPIC_API_KEY"):
        get_llm(LLMSettings("anthropic"))
    with pytest.raises(LLMError, match=r"\$GEMINI_API_KEY or \$GOOGLE_API_KEY"):
        get_llm(LLMSettings("gemini"))
    with pytest.raises(LLMError, match="unknown LLM provider type 'bard'"):
        get_llm(LLMSettings("bard"))
    with pytest.raises(ValueError, match="UNSET_LLM_KEY"):
        get_llm(LLMSettings("openai", api_key="env:UNSET_LLM_KEY"))
    with pytest.raises(ValueError, match="http"):
        get_llm(LLMSettings("openai", base_url="ftp://host", api_key="k"))
    # A local server needs no key once base_url points at it.
    assert get_llm(LLMSettings("openai", base_url="http://127.0.0.1:9/v1")).model == "gpt-5-mini"


# -- is it notes? -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "answer",
    [
        "- User asked why the API hit a rate limit.\n- Claude Code added backoff on 429.",
        "- User asked about an error: the build failed.\n- Codex fixed the import.",
        "Here are the notes:\n- User wanted a README section.",
        "* User asked for a refactor.\n* The agent split config.py.",
        "- Usuario pidió un resumen.\n- Claude Code lo escribió.",
        "Error handling in the parser was rewritten.",  # prose, but not an error message
        "Rate limiting was added to the upload endpoint.",
    ],
)
def test_notes_are_accepted(answer: str) -> None:
    assert check_answer(f"  {answer}\n\n", "model") == answer


@pytest.mark.parametrize(
    "answer",
    [
        "",
        "   \n\t",
        "Credit balance is too low",
        "Your credit balance is too low to access the Anthropic API.",
        'API Error: 529 {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}',
        "Overloaded",
        "Invalid API key · Please run /login",
        "Claude AI usage limit reached|1767225600",
        "You've hit your limit · resets 3pm",
        "Rate limit exceeded, retry later",
        "429 Too Many Requests",
        "Error: connect ECONNREFUSED",
        '{"error": {"message": "quota"}}',
        "<!DOCTYPE html>\n<html><title>502 Bad Gateway</title></html>",
        "<html>\n<body>Service Unavailable</body></html>",
        "Prompt is too long",
        "I'm sorry, but I can't help with that.",
        "I cannot summarize this transcript.",
        "Sorry, I am unable to do that.",
        "As an AI, I do not keep notes.",
        "<think>hmm</think>\n\n",
    ],
)
def test_errors_and_refusals_are_rejected(answer: str) -> None:
    with pytest.raises(LLMError) as info:
        check_answer(answer, "model")
    assert "\n" not in str(info.value)


# -- the host agents' CLIs ----------------------------------------------------------------


@pytest.fixture
def agents(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The fake agents first on PATH; returns their log file."""
    bin_dir = fake_agents(tmp_path / "bin")
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    log = tmp_path / "agents.jsonl"
    monkeypatch.setenv("FAKE_AGENT_LOG", str(log))
    monkeypatch.setenv("CLAUDECODE", "1")  # as inside a Claude Code session
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # the CLI's flags are cached under it
    return log


def test_claude_code_cli(agents: Path) -> None:
    prompt = "Summarize.\n\nTranscript:\n[User]: héllo " + "x" * 300_000  # beyond one argv string's limit
    assert get_llm(LLMSettings("claude-code")).complete(prompt) == "- User asked claude for notes.\n- It wrote them."
    (call,) = calls(agents)
    assert call["stdin"] == prompt
    argv = call["argv"]
    assert argv[0] == "-p" and argv[argv.index("--model") + 1] == "haiku"
    assert argv[argv.index("--tools") + 1] == "" and "--no-session-persistence" in argv
    # memsearch's own hooks stand down inside it, and claude may start inside a session.
    assert call["env"]["MEMSEARCH_DISABLE"] == "1" and call["env"]["CLAUDECODE"] is None


def test_claude_runs_in_safe_mode_where_it_has_it(agents: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The nested `claude -p` gets `--safe-mode` (none of the user's CLAUDE.md, skills, plugins' hooks
    or MCP servers) when its --help lists it; an older CLI runs with the other flags. --help is read
    once per installed binary."""
    help_log = Path(f"{agents}.help")
    llm = get_llm(LLMSettings("claude-code"))
    llm.complete("x")
    assert "--safe-mode" not in calls(agents)[-1]["argv"]  # an older CLI
    llm.complete("x")
    assert help_log.read_text().count("--help") == 1  # cached

    claude = agents.parent / "bin" / "claude"
    claude.write_text(claude.read_text() + "\n", encoding="utf-8")  # an updated CLI
    monkeypatch.setenv("FAKE_CLAUDE_SAFE_MODE", "1")
    for _ in range(2):
        assert get_llm(LLMSettings("claude-code")).complete("x") == "- User asked claude for notes.\n- It wrote them."
        argv = calls(agents)[-1]["argv"]
        assert argv[:2] == ["-p", "--safe-mode"] and argv[argv.index("--tools") + 1] == ""
    assert help_log.read_text().count("--help") == 2


def test_codex_cli(agents: Path) -> None:
    llm = get_llm(LLMSettings("codex", model="gpt-5.1-codex"))
    assert llm.complete("Summarize.") == "- User asked codex for notes.\n- It wrote them."
    (call,) = calls(agents)
    argv = call["argv"]
    assert argv[0] == "exec" and argv[-1] == "-" and call["stdin"] == "Summarize."
    assert argv[argv.index("-m") + 1] == "gpt-5.1-codex" and argv[argv.index("-s") + 1] == "read-only"
    assert "features.hooks=false" in argv and call["env"]["MEMSEARCH_IN_STOP_WORKER"] == "1"
    assert "-p" not in argv and "--profile" not in argv


@pytest.mark.parametrize(("value", "profile"), [("zilliz", "zilliz"), ("  work  ", "work"), (" ", None)])
def test_codex_cli_runs_in_the_profile_named(
    agents: Path, monkeypatch: pytest.MonkeyPatch, value: str, profile: str | None
) -> None:
    """MEMSEARCH_CODEX_PROFILE picks the `codex exec -p` profile (its model provider, login, settings),
    as memsearch 0.4 does; blank: Codex's default."""
    monkeypatch.setenv("MEMSEARCH_CODEX_PROFILE", value)
    get_llm(LLMSettings("codex", model="gpt-5.1-codex")).complete("Summarize.")
    argv = calls(agents)[-1]["argv"]
    assert argv[0] == "exec" and argv[-1] == "-"
    if profile is None:
        assert "-p" not in argv
    else:
        assert argv[argv.index("-p") + 1] == profile and argv.index("-p") < argv.index("-m")


@pytest.mark.parametrize(
    ("mode", "needle"),
    [
        ("credit", "returned an error instead of notes: Credit balance is too low"),
        ("empty", "returned an empty answer"),
        ("fail", "exited with status 3: error: not logged in"),
    ],
)
def test_agent_cli_failures(agents: Path, monkeypatch: pytest.MonkeyPatch, mode: str, needle: str) -> None:
    monkeypatch.setenv("FAKE_AGENT_MODE", mode)
    with pytest.raises(LLMError) as info:
        get_llm(LLMSettings("claude-code")).complete("x")
    assert needle in str(info.value) and "\n" not in str(info.value)


@pytest.mark.slow(reason="calls a local LLM server with retries and timeouts")
def test_agent_cli_timeout_kills_its_process_group(agents: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_AGENT_MODE", "hang")
    start = time.monotonic()
    with pytest.raises(LLMError, match=r"timed out after 1\.5s"):
        get_llm(LLMSettings("codex", timeout=1.5)).complete("x")
    assert time.monotonic() - start < 10
    child = int(Path(f"{agents}.child").read_text())
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        pytest.fail("the agent's child process outlived the timeout")


def test_agent_cli_missing(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(LLMError, match="'claude' is not on PATH"):
        get_llm(LLMSettings("claude-code")).complete("x")


FAKE_OPENCODE = """\
import json, os, sys
keys = ("OPENCODE_CONFIG", "OPENCODE_CONFIG_DIR", "OPENCODE_CONFIG_CONTENT", "OPENCODE_DISABLE_PROJECT_CONFIG",
        "XDG_CONFIG_HOME", "XDG_DATA_HOME", "MEMSEARCH_DISABLE")
seen = {k: os.environ.get(k) for k in keys}
seen["cwd"] = os.getcwd()
seen["argv"] = sys.argv[1:]
with open(os.environ["FAKE_AGENT_LOG"], "a", encoding="utf-8") as log:
    log.write(json.dumps(seen) + "\\n")
print("- User asked opencode for notes.")
"""


def test_opencode_run_gets_the_users_models_and_none_of_their_plugins(
    agents: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The nested `opencode run` keeps the user's provider settings (a relative `{file:}` key
    reference still found) but loads no plugin, MCP server or instruction file, reads no project
    config (a cloned repository may not choose the model), keeps its session out of the user's
    list, and finds the user's login; nothing holding a key is written by memsearch."""
    opencode = agents.parent / "bin" / "opencode"
    opencode.write_text(f"#!{sys.executable}\n{FAKE_OPENCODE}", encoding="utf-8")
    opencode.chmod(0o755)
    home = Path(os.environ["HOME"])
    config = home / ".config" / "opencode"
    config.mkdir(parents=True)
    (config / "opencode.jsonc").write_text(
        "{\n  // the user's setup\n"
        '  "model": "work/fast",\n'
        '  "provider": {"work": {"options": {"baseURL": "http://127.0.0.1:9/v1", "apiKey": "{file:./key.txt}"}}},\n'
        '  "plugin": ["opencode-memsearch", "other-plugin"],\n'
        '  "mcp": {"browser": {"type": "local", "command": ["browser-mcp"]}},\n'
        '  "instructions": ["AGENTS.md"],\n}\n',
        encoding="utf-8",
    )
    (config / "key.txt").write_text("sk-user-secret\n", encoding="utf-8")
    auth = home / ".local" / "share" / "opencode" / "auth.json"
    auth.parent.mkdir(parents=True)
    auth.write_text('{"work": {"type": "api", "key": "sk-login"}}', encoding="utf-8")
    monkeypatch.setenv("OPENCODE_CONFIG_CONTENT", '{"small_model": "work/tiny", "plugin": ["inline"]}')
    project = tmp_path / "cloned"
    project.mkdir()
    (project / "opencode.json").write_text('{"model": "attacker/model"}', encoding="utf-8")
    monkeypatch.chdir(project)

    assert get_llm(LLMSettings("opencode")).complete("Summarize.") == "- User asked opencode for notes."
    (seen,) = calls(agents)
    content = json.loads(seen["OPENCODE_CONFIG_CONTENT"])
    assert content == {
        "model": "work/fast",
        "small_model": "work/tiny",
        "provider": {"work": {"options": {"baseURL": "http://127.0.0.1:9/v1", "apiKey": f"{{file:{config}/key.txt}}"}}},
    }
    assert seen["OPENCODE_DISABLE_PROJECT_CONFIG"] == "true" and seen["MEMSEARCH_DISABLE"] == "1"
    assert seen["OPENCODE_CONFIG"] is None and seen["OPENCODE_CONFIG_DIR"] is None
    assert seen["argv"] == ["run", "Summarize."] and seen["cwd"] != str(project)
    own_config = Path(seen["XDG_CONFIG_HOME"]) / "opencode"
    assert own_config.is_dir() and not list(own_config.iterdir())  # the user's global config is not loaded
    login = Path(seen["XDG_DATA_HOME"]) / "opencode" / "auth.json"
    assert login.is_symlink() and login.resolve() == auth.resolve()
    written = [p for p in (home / ".memsearch").rglob("*") if p.is_file() and not p.is_symlink()]
    assert not any("sk-" in p.read_text(encoding="utf-8", errors="replace") for p in written)
