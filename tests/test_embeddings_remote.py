"""Voyage, Gemini, Jina and Mistral providers against a real HTTP server on
127.0.0.1 that speaks each API (request shape, limits, errors), the `local`
provider with and without sentence-transformers, the providers' token counts,
and one `memsearch index` + `search` run through the Jina protocol.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import re
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

from memsearch_fast.embeddings import (
    PROVIDERS,
    EmbeddingAPIError,
    EmbeddingError,
    EmbeddingProvider,
    UnknownProviderError,
    get_provider,
)
from memsearch_fast.embeddings._remote import RemoteEmbedding
from memsearch_fast.embeddings.google import GoogleEmbedding
from memsearch_fast.embeddings.jina import JinaEmbedding
from memsearch_fast.embeddings.mistral import MistralEmbedding
from memsearch_fast.embeddings.voyage import VoyageEmbedding
from memsearch_fast.parallelism import plan
from memsearch_fast.recall import search as recall
from tests.helpers.cli import make_env, ok, one_line_error, run
from tests.helpers.llm import FakeLLMServer, Reply

KEY = "vk-test-SECRET-0123456789abcdef"
DIM = 8  # vector size for models the server does not know
WORD = re.compile(r"\w+")

# name -> (class, path prefix under the fake server, environment variable)
SPECS: dict[str, tuple[type[RemoteEmbedding], str, str]] = {
    "voyage": (VoyageEmbedding, "/voyage/v1", "VOYAGE_API_KEY"),
    "google": (GoogleEmbedding, "/google/v1beta", "GOOGLE_API_KEY"),
    "jina": (JinaEmbedding, "/jina/v1", "JINA_API_KEY"),
    "mistral": (MistralEmbedding, "/mistral/v1", "MISTRAL_API_KEY"),
}
NAMES = sorted(SPECS)


def lists(vectors):
    """Vectors as lists of floats (an HTTP provider hands on float32 rows)."""
    return [[float(x) for x in v] for v in vectors]


def bow_vector(text: str, dim: int) -> list[float]:
    """Hashed bag of words, deliberately unnormalised: texts sharing words point the same way."""
    vec = [0.0] * dim
    for word in WORD.findall(text.lower()):
        digest = hashlib.sha256(word.encode()).digest()
        vec[int.from_bytes(digest[:4], "big") % dim] += 3.0 if digest[4] & 1 else -3.0
    if not any(vec):
        vec[0] = 1.0
    return vec


def normalized(vec: list[float]) -> list[float]:
    norm = math.sqrt(sum(v * v for v in vec))
    return [v / norm for v in vec]


def expected(texts: list[str], dim: int) -> list[Any]:
    return [pytest.approx(normalized(bow_vector(t, dim)), abs=1e-6) for t in texts]


class FakeEmbeddingAPIs(FakeLLMServer):
    """Voyage (``/voyage/v1/embeddings``), Gemini (``/google/v1beta/models/M:batchEmbedContents``),
    Jina (``/jina/v1/embeddings``) and Mistral (``/mistral/v1/embeddings``), with
    each API's auth header, request limits and error shapes. A bad key is echoed
    back in the error, as some servers do."""

    DIMS: ClassVar[dict[str, int]] = {
        "voyage-3-lite": 512,
        "gemini-embedding-001": 3072,  # native; the client asks for 768
        "jina-embeddings-v4": 2048,
        "jina-embeddings-v2-base-en": 768,
        "mistral-embed": 1024,
    }

    def respond(self, path: str, headers: dict[str, str], body: dict[str, Any]) -> Reply:
        if path.startswith("/google/v1beta/models/") and path.endswith(":batchEmbedContents"):
            return self._google(path, headers, body)
        name = path.split("/")[1]
        if name in ("voyage", "jina", "mistral") and path == f"/{name}/v1/embeddings":
            return self._openai_like(name, headers, body)
        return 404, {}, {"error": "no such endpoint"}

    def _dim(self, model: str, asked: Any) -> int:
        return int(asked) if asked else self.DIMS.get(model, DIM)

    def _google(self, path: str, headers: dict[str, str], body: dict[str, Any]) -> Reply:
        key = headers.get("x-goog-api-key")
        if key != KEY or "authorization" in headers:
            error = {"code": 400, "message": f"API key not valid ({key}). Please pass a valid API key."}
            return 400, {}, {"error": {**error, "status": "INVALID_ARGUMENT"}}
        requests = body["requests"]
        if len(requests) > 100:
            return 400, {}, {"error": {"code": 400, "message": "at most 100 requests can be in one batch"}}
        model = path.removeprefix("/google/v1beta/models/").removesuffix(":batchEmbedContents")
        if model == "missing-model":
            return 404, {}, {"error": {"code": 404, "message": f"models/{model} is not found"}}
        out = []
        for r in requests:
            assert r["model"] == f"models/{model}"
            assert r["taskType"] in ("RETRIEVAL_DOCUMENT", "RETRIEVAL_QUERY")
            text = "".join(p["text"] for p in r["content"]["parts"])
            out.append({"values": bow_vector(text, self._dim(model, r.get("outputDimensionality")))})
        return 200, {}, {"embeddings": out}

    def _openai_like(self, name: str, headers: dict[str, str], body: dict[str, Any]) -> Reply:
        auth = headers.get("authorization")
        if auth != f"Bearer {KEY}":
            if name == "mistral":
                return 401, {}, {"message": f"Unauthorized: {auth}", "request_id": "r1"}
            return 401, {}, {"detail": f"Provided API key {auth} is invalid."}
        texts, model = body["input"], body["model"]
        assert isinstance(texts, list) and all(isinstance(t, str) and t for t in texts)
        if model == "missing-model":
            return 404, {}, {"detail": f"Model {model} not found"}
        limit = {"voyage": 1000, "jina": 2048, "mistral": 10_000}[name]
        if len(texts) > limit:
            return 400, {}, {"detail": f"The max allowed batch size is {limit}"}
        if name == "mistral" and sum(len(t) // 4 + 1 for t in texts) > 16_384:
            message = "Too many tokens overall, split into more batches."
            return 400, {}, {"object": "error", "message": message, "type": "invalid_request_prompt", "code": "3210"}
        asked = {"voyage": "output_dimension", "jina": "dimensions", "mistral": "output_dimension"}[name]
        dim = self._dim(model, body.get(asked))
        items = [{"object": "embedding", "index": i, "embedding": bow_vector(t, dim)} for i, t in enumerate(texts)]
        items.reverse()  # each item carries its index; order is not guaranteed
        return 200, {}, {"object": "list", "data": items, "model": model, "usage": {"total_tokens": len(texts)}}

    def embedding_requests(self, name: str) -> list[dict[str, Any]]:
        return [r for r in self.requests if r["path"].startswith(f"/{name}/")]


@pytest.fixture(scope="module")
def shared_server() -> Iterator[FakeEmbeddingAPIs]:
    srv = FakeEmbeddingAPIs()
    yield srv
    srv.close()


@pytest.fixture
def server(shared_server: FakeEmbeddingAPIs) -> FakeEmbeddingAPIs:
    with shared_server.lock:
        shared_server.requests.clear()
        shared_server.faults.clear()
    return shared_server


@pytest.fixture(autouse=True)
def _no_keys_in_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for _, _, env in SPECS.values():
        monkeypatch.delenv(env, raising=False)


def make(server: FakeEmbeddingAPIs, name: str, model: str | None = None, **kw: Any) -> RemoteEmbedding:
    cls, prefix, _ = SPECS[name]
    kw.setdefault("api_key", KEY)
    kw.setdefault("retry_base_delay", 0.01)
    return cls(model, base_url=server.url + prefix, **kw)  # type: ignore[call-arg]


def arun(coro: Any) -> Any:
    return asyncio.run(coro)


def assert_one_line_without_key(exc: BaseException) -> None:
    msg = str(exc)
    assert "\n" not in msg and msg
    assert KEY not in msg and KEY not in repr(exc)


# -- request shape and parsing, per API ------------------------------------------------------


def test_voyage_document_and_query_input_types(server: FakeEmbeddingAPIs) -> None:
    texts = ["deploy notes", "rollback steps", "on-call rota"]
    with make(server, "voyage") as p:
        assert (p.model_name, p.dimension, p.batch_size) == ("voyage-3-lite", 512, 128)
        assert server.requests == []  # a known model's dimension needs no request
        assert lists(arun(p.embed(texts))) == expected(texts, 512)
        assert arun(p.embed_query("how to deploy")) == expected(["how to deploy"], 512)[0]
    doc, query = server.embedding_requests("voyage")
    assert doc["headers"]["authorization"] == f"Bearer {KEY}"
    assert doc["body"] == {"model": "voyage-3-lite", "input": texts, "input_type": "document", "truncation": True}
    assert query["body"]["input_type"] == "query" and query["body"]["input"] == ["how to deploy"]
    with make(server, "voyage", "voyage-3.5", dimensions=256) as p:
        assert p.dimension == 256
        assert lists(arun(p.embed(["a"]))) == expected(["a"], 256)
    assert server.embedding_requests("voyage")[-1]["body"]["output_dimension"] == 256


def test_jina_tasks_per_side_and_model(server: FakeEmbeddingAPIs) -> None:
    with make(server, "jina") as p:
        assert (p.model_name, p.dimension, p.batch_size) == ("jina-embeddings-v4", 2048, 128)
        assert lists(arun(p.embed(["passage one", "passage two"]))) == expected(["passage one", "passage two"], 2048)
        arun(p.embed_query("question"))
    doc, query = (r["body"] for r in server.embedding_requests("jina"))
    assert doc == {"model": "jina-embeddings-v4", "input": ["passage one", "passage two"], "truncate": True,
                   "task": "retrieval.passage"}  # fmt: skip
    assert query["task"] == "retrieval.query"
    assert server.embedding_requests("jina")[0]["headers"]["authorization"] == f"Bearer {KEY}"

    server.requests.clear()
    with make(server, "jina", "jina-embeddings-v3", task="code", dimensions=256) as p:
        lists(arun(p.embed(["def f(): pass"])))
        arun(p.embed_query("a function"))
    doc, query = (r["body"] for r in server.embedding_requests("jina"))
    assert (doc["task"], query["task"], doc["dimensions"]) == ("code.passage", "code.query", 256)

    server.requests.clear()
    with make(server, "jina", "jina-embeddings-v2-base-en") as p:  # no task adapters
        assert p.dimension == 768
        lists(arun(p.embed(["x"])))
        arun(p.embed_query("y"))
    with make(server, "jina", task="text-matching", dimensions=DIM) as p:
        arun(p.embed_query("z"))
    bodies = [r["body"] for r in server.embedding_requests("jina")]
    assert "task" not in bodies[0] and "task" not in bodies[1] and bodies[2]["task"] == "text-matching"
    with pytest.raises(ValueError, match="task"):
        make(server, "jina", task="")


def test_mistral_request_shape_and_token_limit(server: FakeEmbeddingAPIs) -> None:
    with make(server, "mistral") as p:
        assert (p.model_name, p.dimension, p.batch_size) == ("mistral-embed", 1024, 64)
        assert arun(p.embed_query("q")) == expected(["q"], 1024)[0]
        # 40 texts of ~1,000 approximate tokens: one request of them all would exceed Mistral's 16,384.
        texts = [f"chunk {i} " + "lorem ipsum " * 330 for i in range(40)]
        assert lists(arun(p.embed(texts))) == expected(texts, 1024)
    reqs = server.embedding_requests("mistral")
    assert reqs[0]["body"] == {"model": "mistral-embed", "input": ["q"], "encoding_format": "float"}
    assert all(r["headers"]["authorization"] == f"Bearer {KEY}" for r in reqs)
    sizes = [len(r["body"]["input"]) for r in reqs[1:]]
    assert sum(sizes) == 40 and len(sizes) >= 5
    assert all(sum(len(t) // 4 + 1 for t in r["body"]["input"]) <= 8_000 for r in reqs[1:])
    with make(server, "mistral", "codestral-embed", dimensions=256) as p:
        assert p.dimension == 256 and lists(arun(p.embed(["x"]))) == expected(["x"], 256)
    assert server.embedding_requests("mistral")[-1]["body"]["output_dimension"] == 256


def test_google_batch_embed_contents(server: FakeEmbeddingAPIs) -> None:
    texts = ["first memo", "second memo"]
    with make(server, "google") as p:
        assert (p.model_name, p.dimension, p.batch_size) == ("gemini-embedding-001", 768, 100)
        assert lists(arun(p.embed(texts))) == expected(texts, 768)
        assert arun(p.embed_query("which memo")) == expected(["which memo"], 768)[0]
    doc, query = server.embedding_requests("google")
    assert doc["path"] == "/google/v1beta/models/gemini-embedding-001:batchEmbedContents"  # no ?key=
    assert doc["headers"]["x-goog-api-key"] == KEY and "authorization" not in doc["headers"]
    assert doc["body"] == {
        "requests": [
            {
                "model": "models/gemini-embedding-001",
                "content": {"parts": [{"text": t}]},
                "taskType": "RETRIEVAL_DOCUMENT",
                "outputDimensionality": 768,
            }
            for t in texts
        ]
    }
    assert {r["taskType"] for r in query["body"]["requests"]} == {"RETRIEVAL_QUERY"}
    with make(server, "google", "models/text-embedding-004") as p:  # the resource spelling works too
        assert p.model_name == "text-embedding-004" and p.dimension == 768
    for bad in ("../x", "a?key=1", "m/n"):
        with pytest.raises(ValueError, match="Gemini model name"):
            make(server, "google", bad)


# -- batching, dimensions, retries, keys: every API ------------------------------------------

LIMITS = {"google": 100, "voyage": 1000, "jina": 2048}


@pytest.mark.parametrize("name", sorted(LIMITS))
def test_batches_never_exceed_the_api_limit(server: FakeEmbeddingAPIs, name: str) -> None:
    limit = LIMITS[name]
    texts = [f"t{i}" for i in range(limit + 3)]
    with make(server, name, "small-model", batch_size=100_000, dimensions=DIM) as p:
        assert p.batch_size == limit  # a larger request would be refused
        assert lists(arun(p.embed(texts))) == expected(texts, DIM)
    sizes = [len(r["body"].get("input") or r["body"].get("requests")) for r in server.embedding_requests(name)]
    assert sorted(sizes) == [3, limit]


@pytest.mark.parametrize("name", NAMES)
def test_batch_size_splits_and_keeps_order(server: FakeEmbeddingAPIs, name: str) -> None:
    texts = [f"note {i}: " + "word " * i for i in range(11)]
    with make(server, name, "small-model", batch_size=4, workers=3) as p:
        assert p.workers == 3
        assert lists(arun(p.embed(texts))) == expected(texts, DIM)
        assert lists(arun(p.embed([]))) == []
    sizes = [len(r["body"].get("input") or r["body"].get("requests")) for r in server.embedding_requests(name)]
    assert sorted(sizes) == [3, 4, 4]  # sent concurrently: any order


@pytest.mark.parametrize("name", NAMES)
def test_dimension_of_an_unknown_model_is_probed_once(server: FakeEmbeddingAPIs, name: str) -> None:
    with make(server, name, "custom-model") as p:
        assert p.dimension == DIM and p.dimension == DIM
        assert lists(arun(p.embed(["x"]))) == expected(["x"], DIM)
    assert len(server.embedding_requests(name)) == 2  # one probe, then the text
    server.requests.clear()
    with make(server, name, "custom-model", dimensions=DIM + 1) as p:  # asked for, so known: no probe
        assert p.dimension == DIM + 1
        assert lists(arun(p.embed(["x"]))) == expected(["x"], DIM + 1)
    assert len(server.embedding_requests(name)) == 1


@pytest.mark.parametrize("name", NAMES)
def test_429_and_5xx_are_retried(server: FakeEmbeddingAPIs, name: str) -> None:
    server.faults.append((429, {"retry-after-ms": "20"}, {"detail": "rate limited"}))
    server.faults.append((503, {}, {"error": {"code": 503, "message": "overloaded"}}))
    server.faults.append((502, {}, b"<html>bad gateway</html>"))
    with make(server, name, "small-model", dimensions=DIM) as p:
        assert lists(arun(p.embed(["alpha"]))) == expected(["alpha"], DIM)
    assert len(server.embedding_requests(name)) == 4

    server.requests.clear()
    server.faults.extend([(500, {}, {"detail": "boom\nsecond line"})] * 3)
    with (
        make(server, name, "small-model", dimensions=DIM, max_retries=2) as p,
        pytest.raises(EmbeddingAPIError) as info,
    ):
        lists(arun(p.embed(["alpha"])))
    assert info.value.status == 500 and "gave up after 3 attempts" in str(info.value)
    assert_one_line_without_key(info.value)
    assert len(server.embedding_requests(name)) == 3


@pytest.mark.parametrize("name", NAMES)
def test_bad_key_is_one_line_without_the_key(server: FakeEmbeddingAPIs, name: str) -> None:
    wrong = KEY + "-wrong"
    env = SPECS[name][2]
    with make(server, name, "small-model", api_key=wrong, dimensions=DIM) as p:
        assert wrong not in repr(p) and "***" in repr(p)
        with pytest.raises(EmbeddingAPIError) as info:
            lists(arun(p.embed(["alpha"])))
    msg = str(info.value)
    assert "rejected the API key" in msg and f"${env}" in msg, msg
    assert_one_line_without_key(info.value)
    assert wrong not in msg and "SECRET" not in msg
    assert len(server.embedding_requests(name)) == 1  # not retried


@pytest.mark.parametrize("name", NAMES)
def test_unknown_model_is_a_clear_404(server: FakeEmbeddingAPIs, name: str) -> None:
    with make(server, name, "missing-model", dimensions=DIM) as p, pytest.raises(EmbeddingAPIError) as info:
        lists(arun(p.embed(["alpha"])))
    assert info.value.status == 404 and "model" in str(info.value)
    assert_one_line_without_key(info.value)


@pytest.mark.parametrize("name", NAMES)
def test_key_from_env_and_missing_key(server: FakeEmbeddingAPIs, name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    cls, prefix, env = SPECS[name]
    # The official endpoint without a key: one line naming the variable, before any request.
    with pytest.raises(EmbeddingError) as info:
        cls()  # type: ignore[call-arg]
    assert f"${env}" in str(info.value) and "\n" not in str(info.value)
    monkeypatch.setenv(env, KEY)
    with get_provider(name, model="small-model", base_url=server.url + prefix, retry_base_delay=0.01) as p:
        assert KEY not in repr(p) and KEY not in repr(vars(p))
        assert lists(arun(p.embed(["alpha"]))) == expected(["alpha"], DIM)
    header = server.embedding_requests(name)[-1]["headers"]
    assert KEY in (header.get("authorization", "") + header.get("x-goog-api-key", ""))
    monkeypatch.delenv(env)
    monkeypatch.setenv("MY_EMBED_KEY", KEY)
    with make(server, name, "small-model", api_key="env:MY_EMBED_KEY", dimensions=DIM) as p:
        assert arun(p.embed_query("beta")) == expected(["beta"], DIM)[0]


def test_registry_and_parallelism(server: FakeEmbeddingAPIs) -> None:
    assert {"onnx", "openai", "ollama", "voyage", "google", "jina", "mistral", "local"} == set(PROVIDERS)
    with pytest.raises(UnknownProviderError, match="jina, local, mistral"):
        get_provider("cohere")
    for name, (cls, prefix, _) in SPECS.items():
        with get_provider(name.upper(), base_url=server.url + prefix, api_key=KEY, parallelism=plan(5, cpus=2)) as p:
            assert type(p) is cls and p.workers == 5 and isinstance(p, EmbeddingProvider)


# -- token counts (search --budget) -----------------------------------------------------------


def test_http_providers_count_characters_over_four(server: FakeEmbeddingAPIs) -> None:
    for name in NAMES:
        with make(server, name, dimensions=DIM) as p:
            assert [p.count_tokens(t) for t in ("", "abc", "abcd", "abcde", "é" * 9)] == [0, 1, 1, 2, 3]
            count, label = recall.token_counter(p)
            assert count("x" * 41) == 11 and label == recall.APPROX_TOKENIZER == p.tokenizer_name
    assert recall.token_counter(object()) == (recall.approx_tokens, recall.APPROX_TOKENIZER)


def test_onnx_counts_with_its_tokenizer_untruncated(model_dir: Path) -> None:
    from tokenizers import Tokenizer

    from memsearch_fast.embeddings.onnx import OnnxEmbedding

    tok = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    tok.no_truncation()
    tok.no_padding()
    long_text = "the search service deploys from the release branch " * 100  # far over 256 tokens
    with OnnxEmbedding(model_dir, workers=1, threads=1) as p:
        assert p.count_tokens(long_text) == len(tok.encode(long_text, add_special_tokens=False).ids) > 256
        assert p.count_tokens("bad \ud800 surrogate") > 0
        count, label = recall.token_counter(p)
        assert count is not None and label == f"{model_dir.name} tokenizer.json"
        assert p.max_seq_length == 256  # the embedding tokenizer keeps its truncation
        assert len(arun(p.embed_query(long_text))) == p.dimension


# -- local (sentence-transformers) -----------------------------------------------------------


def test_local_without_sentence_transformers_names_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)  # import fails as if not installed
    with pytest.raises(EmbeddingError) as info:
        get_provider("local")
    msg = str(info.value)
    assert "\n" not in msg and "pip install sentence-transformers" in msg and "onnx" in msg


def test_local_with_sentence_transformers(monkeypatch: pytest.MonkeyPatch) -> None:
    import numpy as np

    made: list[dict[str, Any]] = []

    class FakeTokenizer:
        def encode(self, text: str, add_special_tokens: bool = True, verbose: bool = True) -> list[int]:
            assert add_special_tokens is False and verbose is False
            return [len(w) for w in WORD.findall(text)]

    class SentenceTransformer:
        def __init__(self, name: str, **kwargs: Any) -> None:
            made.append({"name": name, **kwargs})
            self.tokenizer = FakeTokenizer()

        def get_sentence_embedding_dimension(self) -> int:
            return DIM

        def encode(self, texts: list[str], **kwargs: Any) -> Any:
            assert kwargs["normalize_embeddings"] is True and kwargs["show_progress_bar"] is False
            return np.asarray([normalized(bow_vector(t, DIM)) for t in texts], dtype=np.float32)

    module = types.ModuleType("sentence_transformers")
    module.SentenceTransformer = SentenceTransformer  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "sentence_transformers", module)
    monkeypatch.setenv("MEMSEARCH_OFFLINE", "1")
    with get_provider("local", device="cpu", parallelism=plan(4, cpus=4), api_key="ignored") as p:
        assert isinstance(p, EmbeddingProvider)
        assert (p.model_name, p.dimension, p.batch_size, p.workers) == ("all-MiniLM-L6-v2", DIM, 512, 1)
        assert lists(arun(p.embed(["a b", ""]))) == expected(["a b", ""], DIM)
        assert arun(p.embed_query("c")) == expected(["c"], DIM)[0]
        assert p.count_tokens("two words") == 2  # type: ignore[attr-defined]
        assert recall.token_counter(p)[1] == "all-MiniLM-L6-v2 tokenizer"
    assert made == [{"name": "all-MiniLM-L6-v2", "device": "cpu", "trust_remote_code": False, "local_files_only": True}]


# -- end to end: memsearch index + search through the Jina protocol ----------------------------


@pytest.mark.slow(reason="indexes and searches through the CLI against a local API server")
def test_cli_index_and_search_with_jina(tmp_path: Path, shared_server: FakeEmbeddingAPIs) -> None:
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "deploy.md").write_text("# Deploy\n\nShip the release with make ship from the main branch.\n")
    (notes / "cooking.md").write_text("# Recipes\n\nBraise the onions slowly in butter for forty minutes.\n")
    (notes / "garden.md").write_text("# Garden\n\nWater the tomatoes every morning before work.\n")
    env = make_env(tmp_path / "home")
    env["JINA_API_KEY"] = KEY
    common = [
        "--provider", "jina", "--base-url", f"{shared_server.url}/jina/v1",
        "--milvus-uri", str(tmp_path / "m.db"), "--collection", "jina_e2e",
    ]  # fmt: skip
    indexed = ok(run(["index", str(notes), *common], env, timeout=120))
    hits = json.loads(ok(run(["search", "braise onions in butter", "-k", "3", "-j", *common], env)).stdout)
    assert Path(hits[0]["source"]).name == "cooking.md"
    assert hits[0]["score"] > hits[1]["score"]
    digest = ok(run(["search", "ship the release", "--digest", "-k", "1", *common], env)).stdout
    assert "deploy.md" in digest
    assert KEY not in indexed.stdout + indexed.stderr
    bodies = [r["body"] for r in shared_server.embedding_requests("jina")]
    assert {b["model"] for b in bodies} == {"jina-embeddings-v4"}
    assert {b["task"] for b in bodies} == {"retrieval.passage", "retrieval.query"}

    # A wrong key: one line on stderr, naming the variable, never the key.
    env["JINA_API_KEY"] = KEY + "-wrong"
    line = one_line_error(run(["search", "onions", *common], env), "rejected the API key", "$JINA_API_KEY")
    assert "SECRET" not in line
