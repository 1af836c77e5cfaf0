"""OpenAI-compatible and Ollama providers against a real HTTP server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import logging
import math
import socket
import struct
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from memsearch_fast.embeddings import EmbeddingAPIError, EmbeddingProvider, get_provider
from memsearch_fast.embeddings.ollama import OllamaEmbedding
from memsearch_fast.embeddings.openai import OpenAIEmbedding
from memsearch_fast.parallelism import DEFAULT_REMOTE_REQUESTS, plan

KEY = "sk-test-SECRET-0123456789abcdef"
DIM = 8


def lists(vectors):
    """Vectors as lists of floats (an HTTP provider hands on float32 rows)."""
    return [[float(x) for x in v] for v in vectors]


def fake_vector(text: str) -> list[float]:
    """Deterministic, deliberately unnormalised vector for *text*."""
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()
    return [(b - 127.5) / 10.0 for b in digest[:DIM]]


def encoded(vec: list[float], base64_mode: str | bool) -> Any:
    """*vec* as the server sends it: base64 float32 bytes when asked and honoured."""
    if base64_mode == "answer":
        return base64.b64encode(struct.pack(f"<{len(vec)}f", *vec)).decode()
    return vec


def normalized(vec: list[float]) -> list[float]:
    norm = math.sqrt(sum(v * v for v in vec))
    return [v / norm for v in vec]


class FakeServer:
    """Speaks /v1/embeddings (OpenAI) and /api/embed (Ollama); faults are scripted per test."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.faults: list[tuple[int, dict[str, str], Any]] = []  # (status, headers, body) for next requests
        self.lock = threading.Lock()
        self.require_key = True
        self.delay = 0.0
        # encoding_format base64: "answer" it, "ignore" it (floats) or "refuse" it (HTTP 400)
        self.base64 = "answer"
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(length) or b"{}")
                with server.lock:
                    server.requests.append({"path": self.path, "auth": self.headers.get("Authorization"), "body": body})
                    fault = server.faults.pop(0) if server.faults else None
                if server.delay:
                    time.sleep(server.delay)
                if fault is not None:
                    return self.reply(*fault)
                auth = self.headers.get("Authorization")
                if server.require_key and auth != f"Bearer {KEY}":
                    # Some servers echo the key they got; the client must not repeat it.
                    return self.reply(401, {}, {"error": {"message": f"Incorrect API key provided: {auth}"}})
                if body.get("model") == "missing-model":
                    return self.reply(404, {}, {"error": {"message": "model missing-model does not exist"}})
                texts = body["input"]
                if self.path == "/v1/embeddings":
                    b64 = body.get("encoding_format") == "base64"
                    if b64 and server.base64 == "refuse":
                        return self.reply(400, {}, {"error": {"message": "unknown variant `base64`"}})
                    items = [
                        {"object": "embedding", "index": i, "embedding": encoded(fake_vector(t), b64 and server.base64)}
                        for i, t in enumerate(texts)
                    ]
                    items.reverse()  # the API gives an index per item; order is not guaranteed
                    return self.reply(200, {}, {"object": "list", "data": items, "model": body["model"]})
                if self.path == "/api/embed":
                    return self.reply(200, {}, {"model": body["model"], "embeddings": [fake_vector(t) for t in texts]})
                return self.reply(404, {}, {"error": "no such endpoint"})

            def reply(self, status: int, headers: dict[str, str], payload: Any) -> None:
                data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in headers.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    def embedding_requests(self) -> list[dict[str, Any]]:
        return [r for r in self.requests if r["path"] in ("/v1/embeddings", "/api/embed")]

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture()
def server():
    srv = FakeServer()
    yield srv
    srv.close()


def openai(server: FakeServer, **kw: Any) -> OpenAIEmbedding:
    kw.setdefault("api_key", KEY)
    kw.setdefault("retry_base_delay", 0.01)
    return OpenAIEmbedding(kw.pop("model", "text-embedding-3-small"), base_url=f"{server.url}/v1", **kw)


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def assert_one_line_without_key(exc: BaseException) -> None:
    msg = str(exc)
    assert "\n" not in msg
    assert KEY not in msg and KEY not in repr(exc)


def test_order_preserved_across_batches(server: FakeServer) -> None:
    texts = [f"note {i}: " + "word " * i for i in range(10)]
    with openai(server, batch_size=3, dimensions=DIM) as p:
        assert isinstance(p, EmbeddingProvider)
        vectors = lists(run(p.embed(texts)))
    for text, vec in zip(texts, vectors, strict=True):
        assert vec == pytest.approx(normalized(fake_vector(text)), abs=1e-6)
        assert all(type(v) is float for v in vec)
    reqs = server.embedding_requests()
    # requests run concurrently, so they may arrive in any order
    assert sorted(len(r["body"]["input"]) for r in reqs) == [1, 3, 3, 3]
    assert sorted(t for r in reqs for t in r["body"]["input"]) == sorted(texts)
    assert {r["auth"] for r in reqs} == {f"Bearer {KEY}"}
    assert all(r["body"]["model"] == "text-embedding-3-small" for r in reqs)
    assert all(r["body"]["dimensions"] == DIM and r["body"]["encoding_format"] == "base64" for r in reqs)


@pytest.mark.parametrize("mode", ["answer", "ignore"])
def test_base64_vectors_match_floats(server: FakeServer, mode: str) -> None:
    """Base64 answers (and a server that ignores the option and sends floats) give the float path's vectors."""
    texts = [f"text {i}" for i in range(5)]
    server.base64 = mode
    with openai(server, dimensions=DIM) as p:
        vectors = lists(run(p.embed(texts)))
    for text, vec in zip(texts, vectors, strict=True):
        assert vec == pytest.approx(normalized(fake_vector(text)), abs=1e-6)
        assert all(type(v) is float for v in vec)
    assert [r["body"]["encoding_format"] for r in server.embedding_requests()] == ["base64"]


def test_the_answer_reader_reads_what_the_json_path_reads() -> None:
    """Base64 answers are read by the Rust core straight to their vectors; any other
    answer goes to the JSON path, which reads it or says what is wrong, as before."""
    import numpy as np

    from memsearch_fast.embeddings._http import loads
    from memsearch_fast.embeddings._remote import Vectors, base64_answer, parse_indexed

    rows = np.random.default_rng(5).standard_normal((7, 16)).astype("<f4")
    items = [
        {"object": "embedding", "index": i, "embedding": base64.b64encode(r.tobytes()).decode()}
        for i, r in enumerate(rows)
    ]
    items = items[3:] + items[:3]  # out of order: placed by index
    body = json.dumps({"object": "list", "model": "m", "data": items, "usage": {"total_tokens": 3}}).encode()
    got = base64_answer(7)(body)
    assert isinstance(got, Vectors) and np.array_equal(got.rows, rows)
    assert np.array_equal(got.rows, parse_indexed(loads(body), 7))
    one = base64.b64encode(struct.pack("<f", 1.0)).decode()
    others = [
        (json.dumps({"data": [{"index": 0, "embedding": [1.0]}]}), 1),  # floats
        ('{"data": [{"index": 0, "embedding": "' + one.replace("=", "\\u003d") + '"}]}', 1),  # an escape
        (json.dumps({"data": [{"index": 0, "embedding": one}, {"index": 0, "embedding": one}]}), 2),
        (json.dumps({"data": [{"index": "0", "embedding": one}]}), 1),
        (json.dumps({"data": [{"embedding": one}, {"embedding": one + "AAAA"}]}), 2),
        (json.dumps({"data": [{"embedding": one}]}), 2),
        (json.dumps({"vectors": [one]}), 1),
    ]
    for text, n in others:
        assert base64_answer(n)(text.encode()) == loads(text.encode()), text
    assert parse_indexed(loads(others[1][0].encode()), 1).tolist() == [[1.0]]
    with pytest.raises(ValueError):
        base64_answer(1)(b"not json")


def test_base64_refused_falls_back_to_floats(server: FakeServer, caplog: pytest.LogCaptureFixture) -> None:
    server.base64 = "refuse"
    with caplog.at_level(logging.INFO), openai(server, dimensions=DIM) as p:
        first = lists(run(p.embed(["a", "b"])))
        second = lists(run(p.embed(["c"])))
    assert first[0] == pytest.approx(normalized(fake_vector("a")), abs=1e-6)
    assert second[0] == pytest.approx(normalized(fake_vector("c")), abs=1e-6)
    formats = [r["body"]["encoding_format"] for r in server.embedding_requests()]
    assert formats == ["base64", "float", "float"]  # refused once, then floats only
    assert "refused base64" in caplog.text and KEY not in caplog.text


def test_a_400_for_floats_too_is_raised_and_base64_kept(server: FakeServer) -> None:
    too_long = (400, {}, {"error": {"message": "input too long"}})
    server.faults = [too_long, too_long]
    with openai(server, dimensions=DIM, max_retries=0) as p:
        with pytest.raises(EmbeddingAPIError, match="input too long") as exc:
            lists(run(p.embed(["x"])))
        assert exc.value.status == 400
        lists(run(p.embed(["y"])))
    formats = [r["body"]["encoding_format"] for r in server.embedding_requests()]
    assert formats == ["base64", "float", "base64"]


def test_malformed_base64_vector_is_reported(server: FakeServer) -> None:
    bad = {"data": [{"index": 0, "embedding": "not base64!"}]}
    server.faults = [(200, {}, bad)]
    with openai(server, dimensions=DIM) as p, pytest.raises(EmbeddingAPIError, match="unexpected answer"):
        lists(run(p.embed(["x"])))


@pytest.mark.parametrize("dim", [384, 1024, 5])  # 1,024 floats: each row ends in "==", 5 floats in "="
def test_base64_rows_decode_to_their_floats_and_bad_ones_are_refused(dim: int) -> None:
    import numpy as np

    from memsearch_fast.embeddings._remote import decode_base64_rows

    m = np.random.default_rng(dim).standard_normal((40, dim)).astype(np.float32)
    rows = [base64.b64encode(r.tobytes()).decode() for r in m]
    assert np.array_equal(decode_base64_rows(rows), m)
    for bad in ([rows[0][:-4] + "*" * 4], [rows[0], rows[1][:-4]], ["é" * len(rows[0])], ["\ud800" * 4]):
        with pytest.raises(ValueError):
            decode_base64_rows(bad)


def test_token_budget_splits_requests(server: FakeServer) -> None:
    texts = [("x" * 100) + str(i) for i in range(6)]  # ~26 approximate tokens each
    with openai(server, model="custom", dimensions=DIM, max_tokens_per_request=60) as p:
        vectors = lists(run(p.embed(texts)))
    assert len(vectors) == 6
    assert [len(r["body"]["input"]) for r in server.embedding_requests()] == [2, 2, 2]


def test_concurrent_calls_keep_their_order(server: FakeServer) -> None:
    server.delay = 0.02
    lists = [[f"call {c} text {i}" for i in range(7)] for c in range(4)]
    with openai(server, batch_size=2, dimensions=DIM, workers=3) as p:

        async def main() -> list[list[list[float]]]:
            return await asyncio.gather(*(p.embed(texts) for texts in lists))

        results = run(main())
    for texts, vectors in zip(lists, results, strict=True):
        assert vectors == [pytest.approx(normalized(fake_vector(t)), abs=1e-6) for t in texts]


def test_429_then_success_honours_retry_after(server: FakeServer) -> None:
    server.faults.append((429, {"Retry-After": "1"}, {"error": {"message": "Rate limit reached"}}))
    with openai(server, dimensions=DIM) as p:
        start = time.monotonic()
        vectors = lists(run(p.embed(["hello", "world"])))
        elapsed = time.monotonic() - start
    assert elapsed >= 0.9  # waited as told, not the 10 ms backoff
    assert vectors[1] == pytest.approx(normalized(fake_vector("world")), abs=1e-6)
    assert len(server.embedding_requests()) == 2


def test_429_retry_after_ms(server: FakeServer) -> None:
    server.faults.append((429, {"retry-after-ms": "50"}, {"error": {"message": "slow down"}}))
    with openai(server, dimensions=DIM) as p:
        assert len(lists(run(p.embed(["a"])))) == 1
    assert len(server.embedding_requests()) == 2


def test_500_then_success(server: FakeServer) -> None:
    server.faults.append((500, {}, {"error": {"message": "internal error"}}))
    server.faults.append((502, {}, b"<html>bad gateway</html>"))
    with openai(server, dimensions=DIM) as p:
        vectors = lists(run(p.embed(["alpha"])))
    assert vectors[0] == pytest.approx(normalized(fake_vector("alpha")), abs=1e-6)
    assert len(server.embedding_requests()) == 3


def test_persistent_503_gives_up_with_one_line(server: FakeServer) -> None:
    server.faults.extend([(503, {}, {"error": {"message": "overloaded\nsecond line"}})] * 3)
    with openai(server, dimensions=DIM, max_retries=2) as p, pytest.raises(EmbeddingAPIError) as info:
        lists(run(p.embed(["alpha"])))
    assert info.value.status == 503
    assert "gave up after 3 attempts" in str(info.value)
    assert_one_line_without_key(info.value)
    assert len(server.embedding_requests()) == 3


def test_401_is_clear_and_never_shows_the_key(server: FakeServer) -> None:
    with openai(server, api_key=KEY + "-wrong", dimensions=DIM) as p, pytest.raises(EmbeddingAPIError) as info:
        lists(run(p.embed(["alpha"])))
    assert info.value.status == 401
    assert "API key" in str(info.value)
    assert_one_line_without_key(info.value)
    assert KEY + "-wrong" not in str(info.value)
    assert len(server.embedding_requests()) == 1  # not retried


def test_404_unknown_model(server: FakeServer) -> None:
    with openai(server, model="missing-model", dimensions=DIM) as p, pytest.raises(EmbeddingAPIError) as info:
        lists(run(p.embed(["alpha"])))
    assert info.value.status == 404
    assert "model" in str(info.value) and "base_url" in str(info.value)
    assert_one_line_without_key(info.value)


def test_unreachable_server_is_one_line() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    p = OpenAIEmbedding(
        "m", base_url=f"http://127.0.0.1:{port}/v1", api_key=KEY, dimensions=DIM, max_retries=1, retry_base_delay=0.01
    )
    with p, pytest.raises(EmbeddingAPIError) as info:
        lists(run(p.embed(["alpha"])))
    assert info.value.status == 0 and "cannot reach" in str(info.value)
    assert_one_line_without_key(info.value)


def test_invalid_json_answer(server: FakeServer) -> None:
    server.faults.append((200, {}, b"not json"))
    with openai(server, dimensions=DIM) as p, pytest.raises(EmbeddingAPIError, match="invalid JSON"):
        lists(run(p.embed(["alpha"])))


def test_the_wire_json_reads_and_writes_as_the_standard_library() -> None:
    """orjson carries the requests and answers; what it refuses falls back to json."""
    import json

    from memsearch_fast.embeddings import _http

    payload = {"model": "m", "input": ["é 中文", "plain"], "n": 2**70}
    assert json.loads(_http.dumps(payload)) == payload
    assert _http.dumps({"input": ["é"]}).decode("utf-8") == '{"input":["é"]}'  # UTF-8, not escapes
    body = b'{"data": [{"embedding": [NaN, 0.5], "index": 0}]}'
    assert repr(_http.loads(body)) == repr(json.loads(body))
    with pytest.raises(ValueError):
        _http.loads(b"not json")
    with pytest.raises(UnicodeEncodeError):
        _http.dumps({"input": ["x\udc80"]})  # a lone surrogate is refused as before


def test_key_sources_and_redaction(server: FakeServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    p = OpenAIEmbedding("custom", base_url=f"{server.url}/v1", dimensions=DIM)  # key from OPENAI_API_KEY
    assert lists(run(p.embed(["alpha"])))
    assert KEY not in repr(p) and KEY not in str(p) and "***" in repr(p)
    assert KEY not in repr(vars(p))
    p.close()
    monkeypatch.delenv("OPENAI_API_KEY")
    monkeypatch.setenv("MY_EMBED_KEY", KEY)
    with openai(server, api_key="env:MY_EMBED_KEY", dimensions=DIM) as p2:
        assert run(p2.embed(["beta"]))
    assert server.embedding_requests()[-1]["auth"] == f"Bearer {KEY}"
    with pytest.raises(ValueError, match="MY_MISSING_KEY"):
        OpenAIEmbedding(api_key="env:MY_MISSING_KEY")


def test_empty_and_odd_texts_are_sent_safely(server: FakeServer) -> None:
    texts = ["", "   ", "emoji 🚀", "x" * 50_000]
    with openai(server, dimensions=DIM, max_input_chars=1000) as p:
        vectors = lists(run(p.embed(texts)))
        assert lists(run(p.embed([]))) == []
    assert len(vectors) == 4
    sent = server.embedding_requests()[0]["body"]["input"]
    assert all(s for s in sent) and sent[:2] == [" ", " "]  # OpenAI rejects empty strings
    assert len(sent[3]) == 1000


def test_dimension_known_or_probed(server: FakeServer) -> None:
    with openai(server) as known:
        assert known.dimension == 1536
    assert server.embedding_requests() == []
    with openai(server, model="local-model") as probed:
        assert probed.dimension == DIM
        assert probed.dimension == DIM
    assert len(server.embedding_requests()) == 1


def test_dimension_mismatch_is_reported(server: FakeServer) -> None:
    with openai(server, dimensions=DIM + 1) as p, pytest.raises(EmbeddingAPIError, match="expected 9"):
        lists(run(p.embed(["alpha"])))


def test_get_provider_builds_openai(server: FakeServer) -> None:
    p = get_provider("OpenAI", model="local-model", base_url=f"{server.url}/v1", api_key=KEY, batch_size=5)
    try:
        assert (p.model_name, p.batch_size) == ("local-model", 5)
        assert run(p.embed_query("q")) == pytest.approx(normalized(fake_vector("q")), abs=1e-6)
    finally:
        p.close()


def test_workers_are_the_concurrent_requests(server: FakeServer) -> None:
    with openai(server, dimensions=DIM) as p:
        assert p.workers == plan().remote_requests == DEFAULT_REMOTE_REQUESTS
    with openai(server, dimensions=DIM, workers=3) as p:
        assert p.workers == 3 and "workers=3" in repr(p)
    for name, url in (("openai", f"{server.url}/v1"), ("ollama", server.url)):
        with get_provider(name, base_url=url, api_key=KEY, parallelism=plan(5, cpus=2)) as p:
            assert isinstance(p, EmbeddingProvider) and p.workers == 5
        with get_provider(name, base_url=url, api_key=KEY, parallelism=plan(cpus=64)) as p:
            assert p.workers == DEFAULT_REMOTE_REQUESTS
    with pytest.raises(ValueError, match="either parallelism or workers"):
        get_provider("openai", base_url=f"{server.url}/v1", api_key=KEY, workers=2, parallelism=plan(2))
    with pytest.raises(ValueError, match="workers"):
        OpenAIEmbedding(base_url=f"{server.url}/v1", api_key=KEY, workers=0)


def test_long_error_message_is_bounded_and_redacted(server: FakeServer) -> None:
    # The key straddles the 300-character bound: it must be masked before the message is cut.
    fault = (400, {}, {"error": {"message": "x" * 290 + f" key {KEY} was bad\nsecond line"}})
    server.faults += [fault, fault]  # base64 refused, then floats too: the server's answer
    with openai(server, dimensions=DIM) as p, pytest.raises(EmbeddingAPIError) as info:
        lists(run(p.embed(["alpha"])))
    assert info.value.status == 400
    assert_one_line_without_key(info.value)
    assert "sk-" not in str(info.value) and "second line" not in str(info.value)
    assert str(info.value).endswith("…")


def test_bad_input_types(server: FakeServer) -> None:
    with openai(server, dimensions=DIM) as p:
        with pytest.raises(TypeError, match="list of str"):
            lists(run(p.embed("not a list")))  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="item 1"):
            lists(run(p.embed(["ok", None])))  # type: ignore[list-item]
    with pytest.raises(ValueError, match="base_url"):
        OpenAIEmbedding(base_url="ftp://example.com")


def test_ollama_embed(server: FakeServer) -> None:
    server.require_key = False
    server.faults.append((500, {}, {"error": "model is loading"}))
    texts = [f"memo {i}" for i in range(5)]
    p = get_provider("ollama", model="nomic-embed-text", base_url=server.url, batch_size=2)
    try:
        assert p.dimension == DIM  # probe request (hits the 500 first, then retries)
        vectors = lists(run(p.embed(texts)))
    finally:
        p.close()
    assert vectors == [pytest.approx(normalized(fake_vector(t)), abs=1e-6) for t in texts]
    reqs = server.embedding_requests()
    assert all(r["path"] == "/api/embed" and r["body"]["truncate"] is True for r in reqs)
    assert [len(r["body"]["input"]) for r in reqs[:2]] == [1, 1]  # probe: 500, then success
    assert sorted(len(r["body"]["input"]) for r in reqs[2:]) == [1, 2, 2]
    assert all(r["auth"] is None for r in reqs)


def test_ollama_host_env(server: FakeServer, monkeypatch: pytest.MonkeyPatch) -> None:
    server.require_key = False
    monkeypatch.setenv("OLLAMA_HOST", server.url.removeprefix("http://"))
    with OllamaEmbedding(dimensions=DIM) as p:
        assert len(lists(run(p.embed(["a", "b"])))) == 2
    assert server.embedding_requests()[0]["body"]["model"] == "nomic-embed-text"
