"""`memsearch mcp`: the stdio MCP server, driven by the SDK's own client.

The server runs as a real subprocess (`python -m memsearch_fast mcp`) against
Milvus Lite in a temporary directory and the shared ONNX model; its answers
are compared with what the same commands print with `-j`. One index and one
server per module: loading the model is the slow part.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.cli import make_env, ok, run

mcp = pytest.importorskip("mcp")
from mcp import ClientSession, StdioServerParameters  # noqa: E402
from mcp.client.stdio import stdio_client  # noqa: E402
from mcp.shared.exceptions import McpError  # noqa: E402

TRANSCRIPT = Path(__file__).resolve().parent / "fixtures" / "transcripts" / "claude-code.jsonl"
SESSION = "5f0c2a9e-7d41-4c8e-9b1a-3e6f2d8c0a57"
TURN = "b7e2d4c6"
QUERY = "deploy the search service"
TOOLS = {"memory_search", "memory_expand", "memory_get", "memory_transcript"}

NOTES = {
    "deploy.md": "# Deploy\n\nThe search service deploys with `make ship` from the release branch.\n\n"
    "## Rollback\n\nRoll back the search service with `make rollback` and page the on-call.\n",
    "search.md": "# Search service\n\nThe search service runs hybrid dense and BM25 retrieval.\n\n"
    "## Tuning\n\nRaise top-k for the search service when recall drops after a deploy.\n",
    "cooking.md": "# Recipes\n\nBraise the onions slowly in butter for forty minutes.\n",
    "keys.md": "# Keys\n\nDeploy keys rotate every ninety days; the search service reads them at start.\n",
    "memory/2026-03-07.md": "# 2026-03-07\n\n## Session 05:10\n\n"
    f"<!-- session:{SESSION} turn:{TURN} transcript:{TRANSCRIPT} -->\n"
    "- The upload test failed after the nginx bump: client_max_body_size was reset to 1m.\n"
    "- Raised the upload limit in nginx.conf and reran the upload test.\n",
}


class Client:
    """An MCP client session over stdio on a loop of its own, called from sync tests."""

    def __init__(self, params: StdioServerParameters, errlog: Any) -> None:
        self._params, self._errlog = params, errlog
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._stop: asyncio.Event | None = None
        self.session: ClientSession | None = None
        ready: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._main = asyncio.run_coroutine_threadsafe(self._serve(ready), self._loop)
        ready.result(timeout=120)

    async def _serve(self, ready: concurrent.futures.Future[None]) -> None:
        self._stop = asyncio.Event()
        try:
            async with (
                stdio_client(self._params, errlog=self._errlog) as (read, write),
                ClientSession(read, write) as session,
            ):
                await session.initialize()
                self.session = session
                ready.set_result(None)
                await self._stop.wait()
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc)
            raise

    def do(self, coro: Any, timeout: float = 120) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout=timeout)

    def call(self, name: str, args: dict[str, Any] | None = None) -> Any:
        assert self.session is not None
        return self.do(self.session.call_tool(name, args or {}))

    def ok(self, name: str, args: dict[str, Any] | None = None) -> Any:
        """The JSON of a successful call's first text block."""
        result = self.call(name, args)
        assert not result.isError, result.content
        return json.loads(result.content[0].text)

    def error(self, name: str, args: dict[str, Any]) -> str:
        """The one line of a failed call."""
        result = self.call(name, args)
        assert result.isError, result.content
        assert len(result.content) == 1
        text = result.content[0].text
        assert "\n" not in text and "Traceback" not in text, text
        return str(text)

    def close(self) -> None:
        assert self._stop is not None
        self._loop.call_soon_threadsafe(self._stop.set)
        self._main.result(timeout=30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()


class Corpus:
    def __init__(self, notes: Path, env: dict[str, str], common: list[str]) -> None:
        self.notes, self.env, self.common = notes, env, common

    def cli(self, *args: str, model: bool = True) -> Any:
        """The JSON a command prints (`get` takes no model flag)."""
        common = self.common if model else self.common[:2]
        return json.loads(ok(run([*args, *common], self.env)).stdout)


# Its module fixtures are built once, on one worker (`--dist loadgroup`).
pytestmark = pytest.mark.xdist_group("mcp")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory, model_dir: Path) -> Iterator[Corpus]:
    root = tmp_path_factory.mktemp("mcp")
    notes = root / "notes"
    for name, body in NOTES.items():
        (notes / name).parent.mkdir(parents=True, exist_ok=True)
        (notes / name).write_text(body, encoding="utf-8")
    db = root / "m.db"
    env = make_env(root / "home")
    common = ["--milvus-uri", str(db), "-m", str(model_dir)]
    ok(run(["index", str(notes), *common], env))
    yield Corpus(notes, env, common)
    from memsearch_fast.lite import broker as lite_broker

    lite_broker.stop_server(str(db))


@pytest.fixture(scope="module")
def server(corpus: Corpus, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Client, Path]]:
    log = tmp_path_factory.mktemp("mcp-log") / "server.err"
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "memsearch_fast", "mcp", *corpus.common], env=corpus.env
    )
    with log.open("w", encoding="utf-8") as errlog:
        client = Client(params, errlog)
        try:
            yield client, log
        finally:
            client.close()


@pytest.fixture
def client(server: tuple[Client, Path]) -> Client:
    return server[0]


# -- tools ------------------------------------------------------------------------------------


@pytest.mark.slow(reason="starts the MCP server as a subprocess with the real model")
def test_lists_the_four_tools_with_their_schemas(client: Client) -> None:
    tools = {t.name: t for t in client.do(client.session.list_tools()).tools}
    assert set(tools) == TOOLS
    search = tools["memory_search"].inputSchema
    assert search["required"] == ["query"]
    assert set(search["properties"]) == {"query", "top_k", "min_score", "budget", "digest", "source_prefix"}
    assert tools["memory_expand"].inputSchema["required"] == ["chunk_hash"]
    assert set(tools["memory_get"].inputSchema["properties"]) == {"path", "start", "count"}
    assert set(tools["memory_transcript"].inputSchema["properties"]) == {"path", "turn", "context"}
    assert all(t.description for t in tools.values())


def test_search_finds_the_right_file_as_search_j_does(corpus: Corpus, client: Client) -> None:
    hits = client.ok("memory_search", {"query": "braise onions in butter", "top_k": 3})
    assert isinstance(hits, list) and len(hits) == 3
    assert hits[0]["source"] == str(corpus.notes / "cooking.md")
    assert set(hits[0]) >= {"content", "source", "heading", "chunk_hash", "start_line", "end_line", "score"}

    assert client.ok("memory_search", {"query": QUERY}) == corpus.cli("search", QUERY, "-j")
    only = client.ok("memory_search", {"query": QUERY, "source_prefix": str(corpus.notes / "keys")})
    assert [h["source"] for h in only] == [str(corpus.notes / "keys.md")]


def test_tiers_match_the_cli(corpus: Corpus, client: Client) -> None:
    hits = client.ok("memory_search", {"query": QUERY, "top_k": 5})
    assert len(hits) == 5
    cut = (hits[1]["score"] + hits[2]["score"]) / 2
    for args, flags in (
        ({"budget": 120}, ["--budget", "120"]),
        ({"digest": True}, ["--digest"]),
        ({"digest": True, "budget": 60, "min_score": cut}, ["--digest", "--budget", "60", "--min-score", str(cut)]),
    ):
        ours = client.ok("memory_search", {"query": QUERY, "top_k": 5, **args})
        assert ours == corpus.cli("search", QUERY, "-k", "5", "-j", *flags), args
        assert set(ours) == {"results", "dropped", "below_min_score", "budget", "tokens", "tokenizer"}
    budgeted = client.ok("memory_search", {"query": QUERY, "budget": 120})
    assert budgeted["dropped"] > 0 and "tokenizer.json" in budgeted["tokenizer"]
    below = sum(h["score"] < cut for h in hits)
    assert below >= 1
    assert client.ok("memory_search", {"query": QUERY, "min_score": cut})["below_min_score"] == below


@pytest.mark.slow(reason="starts the MCP server as a subprocess with the real model")
def test_expand_get_and_transcript_answer_as_their_commands(corpus: Corpus, client: Client) -> None:
    hit = client.ok("memory_search", {"query": "nginx upload limit", "top_k": 1})[0]
    assert hit["source"] == str(corpus.notes / "memory" / "2026-03-07.md")
    expanded = client.ok("memory_expand", {"chunk_hash": hit["chunk_hash"]})
    assert expanded == corpus.cli("expand", hit["chunk_hash"], "-j")
    assert expanded["anchor"] == {"session": SESSION, "turn": TURN, "transcript": str(TRANSCRIPT)}
    narrow = client.ok("memory_expand", {"chunk_hash": hit["chunk_hash"], "lines": 0})
    assert narrow == corpus.cli("expand", hit["chunk_hash"], "-n", "0", "-j")

    source = str(corpus.notes / "deploy.md")
    got = client.ok("memory_get", {"path": source, "start": 3, "count": 2})
    assert got == corpus.cli("get", source, "--from", "3", "--lines", "2", "-j", model=False)
    assert got["content"].startswith("The search service deploys")

    anchor = expanded["anchor"]
    turns = client.ok("memory_transcript", {"path": anchor["transcript"], "turn": anchor["turn"], "context": 1})
    proc = ok(run(["transcript", anchor["transcript"], "-t", anchor["turn"], "-c", "1", "-j"], corpus.env))
    assert turns == json.loads(proc.stdout)
    assert [t["uuid"][:13] for t in turns] == ["a1c3e5f7-0006", "b7e2d4c6-0008", "d4f6a8b0-0010"]
    assert len(client.ok("memory_transcript", {"path": str(TRANSCRIPT)})) > len(turns)


def test_bad_arguments_are_one_line_errors_and_the_server_goes_on(
    corpus: Corpus, client: Client, tmp_path: Path
) -> None:
    assert "chunk not found: deadbeef" in client.error("memory_expand", {"chunk_hash": "deadbeef"})
    assert client.ok("memory_search", {"query": QUERY, "top_k": 1})

    outside = tmp_path / "outside.md"
    outside.write_text("# secret\n", encoding="utf-8")
    assert "not an indexed file" in client.error("memory_get", {"path": str(outside)})
    assert "not an indexed file" in client.error("memory_get", {"path": str(corpus.notes / "missing.md")})
    missing = client.error("memory_transcript", {"path": str(tmp_path / "nope.jsonl")})
    assert "nope.jsonl" in missing
    credentials = tmp_path / "credentials"
    credentials.write_text('{"type": "user", "message": {"role": "user", "content": "aws_secret=XYZ"}}\n')
    refused = client.error("memory_transcript", {"path": str(credentials)})
    assert "not a session transcript" in refused and "XYZ" not in refused
    assert client.error("memory_search", {"query": QUERY, "top_k": 0})
    assert client.error("memory_search", {"query": QUERY, "budget": "lots"})
    assert client.error("memory_get", {"path": str(corpus.notes / "deploy.md"), "start": 0})
    with pytest.raises(McpError) as unknown:  # a protocol error, as the MCP specification asks
        client.call("memory_nothing", {})
    assert unknown.value.error.code == -32602 and "memory_nothing" in unknown.value.error.message
    assert "unknown argument" in client.error("memory_expand", {"chunk_hash": "x", "section": False})
    assert "missing argument: query" in client.error("memory_search", {})

    hits = client.ok("memory_search", {"query": "braise onions in butter", "top_k": 1})
    assert hits[0]["source"] == str(corpus.notes / "cooking.md")


@pytest.mark.slow(reason="starts the MCP server as a subprocess with the real model")
def test_warm_search_is_fast(client: Client) -> None:
    import time

    client.ok("memory_search", {"query": "warm up", "top_k": 5})
    times = []
    for i in range(15):
        t0 = time.perf_counter()
        client.ok("memory_search", {"query": f"search service deploy {i}", "top_k": 5})
        times.append(time.perf_counter() - t0)
    times.sort()
    # The model is loaded once: a warm call is the query's embedding plus the store's search,
    # far below a process start (seconds); the bench measures the real figure.
    assert times[len(times) // 2] < 0.5, times


def test_server_wrote_no_traceback(server: tuple[Client, Path]) -> None:
    assert "Traceback" not in server[1].read_text(encoding="utf-8")


# -- start-up -----------------------------------------------------------------------------------


def test_help_does_not_import_the_sdk(corpus: Corpus, tmp_path: Path) -> None:
    for args in (["--help"], ["mcp", "--help"]):
        proc = subprocess.run(
            [sys.executable, "-X", "importtime", "-m", "memsearch_fast.cli", *args],
            env=corpus.env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 0, proc.stderr
        imported = {line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if "import time:" in line}
        heavy = sorted(m for m in imported if m.split(".")[0] in ("mcp", "onnxruntime", "pymilvus"))
        assert heavy == [], f"{args} imported {heavy}"
        assert "memsearch_fast.serve.mcp" not in imported
    assert "memory_search" in proc.stdout


def test_missing_collection_is_an_error_not_a_crash(corpus: Corpus, tmp_path: Path, model_dir: Path) -> None:
    """A server on an empty database answers each call with one line; transcript still works."""

    async def scenario() -> tuple[Any, Any]:
        params = StdioServerParameters(
            command=sys.executable,
            args=["-m", "memsearch_fast", "mcp", "--milvus-uri", str(tmp_path / "empty.db"), "-m", str(model_dir)],
            env=corpus.env,
        )
        with (tmp_path / "err.log").open("w") as errlog:
            async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as session:
                await session.initialize()
                failed = await session.call_tool("memory_search", {"query": QUERY})
                turns = await session.call_tool("memory_transcript", {"path": str(TRANSCRIPT), "turn": TURN})
                return failed, turns

    failed, turns = asyncio.run(asyncio.wait_for(scenario(), 120))
    assert failed.isError and "does not exist" in failed.content[0].text and "\n" not in failed.content[0].text
    assert not turns.isError and json.loads(turns.content[0].text)
    assert "Traceback" not in (tmp_path / "err.log").read_text()


@pytest.mark.slow(reason="starts the MCP server as a subprocess with the real model")
def test_project_serves_the_collection_the_hooks_write(corpus: Corpus, tmp_path: Path, model_dir: Path) -> None:
    """`mcp --project` in a project reads the per-project collection the agent hooks index."""
    from memsearch_fast.agents.project import locate

    project = tmp_path / "proj"
    (project / ".git").mkdir(parents=True)
    memory = project / ".memsearch" / "memory"
    memory.mkdir(parents=True)
    (memory / "2026-11-23.md").write_text("### 10:00\n- User asked about the zeppelin hangar lease.\n")
    db = tmp_path / "p.db"
    collection = locate(str(project)).collection
    subprocess.run(
        [
            sys.executable,
            "-m",
            "memsearch_fast",
            "index",
            str(memory),
            "--milvus-uri",
            str(db),
            "-m",
            str(model_dir),
            "--collection",
            collection,
            "-q",
        ],
        env=corpus.env,
        check=True,
        timeout=300,
    )

    async def scenario() -> Any:
        params = StdioServerParameters(
            command=sys.executable,
            args=["-m", "memsearch_fast", "mcp", "--project", "--milvus-uri", str(db), "-m", str(model_dir)],
            env=corpus.env,
            cwd=str(project / ".memsearch"),
        )
        with (tmp_path / "err.log").open("w") as errlog:
            async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as session:
                await session.initialize()
                return await session.call_tool("memory_search", {"query": "zeppelin hangar"})

    try:
        found = asyncio.run(asyncio.wait_for(scenario(), 120))
    finally:
        from memsearch_fast.lite import broker

        broker.stop_server(str(db))
    assert not found.isError, found.content
    assert "zeppelin hangar" in json.loads(found.content[0].text)[0]["content"]


def test_lines_that_are_no_request_get_json_rpc_errors(corpus: Corpus, tmp_path: Path, model_dir: Path) -> None:
    """JSON-RPC 2.0: an unparsable line → -32700, no method or an id that is no string or
    number → -32600, an unknown method → -32601, params that are no object → -32602; the
    server answers each and goes on."""
    lines = [
        "this is not json",
        json.dumps({"jsonrpc": "2.0", "id": 7}),
        json.dumps({"jsonrpc": "2.0", "id": 8, "method": "no/such/method"}),
        json.dumps({"jsonrpc": "2.0", "method": "notifications/nothing"}),  # a notification: no answer
        json.dumps({"jsonrpc": "2.0", "id": {"an": "object"}, "method": "ping"}),
        json.dumps({"jsonrpc": "2.0", "id": None, "method": "ping"}),
        json.dumps({"jsonrpc": "2.0", "id": 10, "method": "tools/list", "params": [1, 2]}),
        json.dumps({"jsonrpc": "2.0", "id": 9, "method": "ping"}),
    ]
    answers: list[dict[str, Any]] = []
    with (tmp_path / "err.log").open("w") as errlog:
        proc = subprocess.Popen(  # an empty database: nothing to warm up, only the protocol
            [
                sys.executable,
                "-m",
                "memsearch_fast",
                "mcp",
                "--milvus-uri",
                str(tmp_path / "e.db"),
                "-m",
                str(model_dir),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=errlog,
            env=corpus.env,
            text=True,
        )
        assert proc.stdin is not None and proc.stdout is not None
        try:
            proc.stdin.write("".join(line + "\n" for line in lines))
            proc.stdin.flush()  # left open: a client waits for its answers
            # Lines are read in a thread: select() on a buffered pipe misses lines that one
            # readline() already took into the buffer (it waited out the deadline with them there).
            lines_out: queue.Queue[str] = queue.Queue()
            stdout = proc.stdout

            def pump_lines() -> None:
                for text in stdout:
                    lines_out.put(text)

            pump = threading.Thread(target=pump_lines, daemon=True)
            pump.start()
            deadline = time.monotonic() + 60
            while len(answers) < 7:
                try:
                    answers.append(json.loads(lines_out.get(timeout=max(0.01, deadline - time.monotonic()))))
                except queue.Empty:
                    break
        finally:
            proc.stdin.close()
            proc.wait(timeout=60)
            pump.join(10)  # it ends at the pipe's end
            proc.stdout.close()
    # a notification the server does not act on is dropped quietly (the SDK logged a page of warnings)
    assert "notifications/nothing" not in (tmp_path / "err.log").read_text(), (tmp_path / "err.log").read_text()
    assert [(a.get("id"), a.get("error", {}).get("code")) for a in answers] == [
        (None, -32700),
        (7, -32600),
        (8, -32601),
        (None, -32600),  # an id that is an object or null: no notification, an invalid request
        (None, -32600),
        (10, -32602),  # params as an array
        (9, None),
    ], answers
    assert answers[-1]["result"] == {}
    assert all(a["jsonrpc"] == "2.0" for a in answers)
    assert "Traceback" not in (tmp_path / "err.log").read_text()


@pytest.mark.slow(reason="starts the MCP server as a subprocess with the real model")
def test_a_request_in_hand_when_stdin_ends_is_answered(corpus: Corpus) -> None:
    """A client that sends its last request and closes stdin still gets the answer: the
    server stops once what it was asked is answered (a search here, which first loads
    the model: well after stdin has ended)."""
    init = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
    lines = [
        json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init}),
        json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json.dumps(
            {
                "jsonrpc": "2.0",
                "id": 2,
                "method": "tools/call",
                "params": {"name": "memory_search", "arguments": {"query": QUERY, "top_k": 1}},
            }
        ),
    ]
    done = subprocess.run(
        [sys.executable, "-m", "memsearch_fast", "mcp", *corpus.common],
        input="".join(line + "\n" for line in lines),  # then stdin ends
        capture_output=True,
        env=corpus.env,
        text=True,
        timeout=180,
    )
    answers = {a["id"]: a for a in map(json.loads, done.stdout.splitlines())}
    assert sorted(answers) == [1, 2], done.stdout
    assert not answers[2]["result"].get("isError"), answers[2]
    assert json.loads(answers[2]["result"]["content"][0]["text"]), "no hit"
    assert "Traceback" not in done.stderr
