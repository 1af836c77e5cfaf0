"""Cross-encoder reranking: `memsearch model import` of a BertForSequenceClassification
checkpoint, the converted graph against a numpy forward pass, and `search
--reranker-model` end to end (real Milvus Lite, the shared embedding model).

The cross-encoder is generated here (random weights, fixed seed, hidden 32,
two layers) with the shared model's tokenizer.json, so tokenisation is real.
"""

from __future__ import annotations

import asyncio
import json
import math
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from memsearch_fast import config as cfgmod
from memsearch_fast.errors import ModelConversionError, RerankerError
from memsearch_fast.recall import rerank
from tests.helpers.cli import make_env, ok, one_line_error, run
from tests.helpers.safetensors import write_safetensors

HIDDEN, HEADS, LAYERS, INTER, MAX_POS = 32, 4, 2, 64, 96
QUERY = "how do we roll back a failed deploy of the search service"

#: Sections of the indexed notes: more than the 20 candidates a -k 3 search reranks.
TOPICS = [
    "deploy", "rollback", "search service", "nginx upload limit", "postgres migration", "redis cache",
    "jwt cookies", "flamegraph profile", "release tags", "merge conflicts", "onions braised in butter",
    "bread dough", "garden tomatoes", "bicycle repair", "tax forms", "piano practice", "ninety day key rotation",
    "on-call paging", "BM25 analyzer", "dense vectors", "chunk sizes", "watch debounce", "manifest files",
    "hook timeouts", "summaries",
]  # fmt: skip


# --------------------------------------------------------------------------- the model


def make_checkpoint(dest: Path, tokenizer: Path, *, labels: int = 1, seed: int = 11) -> dict[str, np.ndarray]:
    """A BertForSequenceClassification checkpoint as transformers saves it; returns its weights."""
    vocab = json.loads(tokenizer.read_text())["model"]["vocab"]
    rng = np.random.default_rng(seed)
    shapes: dict[str, tuple[int, ...]] = {
        "bert.embeddings.word_embeddings.weight": (len(vocab), HIDDEN),
        "bert.embeddings.position_embeddings.weight": (MAX_POS, HIDDEN),
        "bert.embeddings.token_type_embeddings.weight": (2, HIDDEN),
        "bert.embeddings.LayerNorm.weight": (HIDDEN,),
        "bert.embeddings.LayerNorm.bias": (HIDDEN,),
        "bert.pooler.dense.weight": (HIDDEN, HIDDEN),
        "bert.pooler.dense.bias": (HIDDEN,),
        "classifier.weight": (labels, HIDDEN),
        "classifier.bias": (labels,),
    }
    for n in range(LAYERS):
        p = f"bert.encoder.layer.{n}."
        for part in ("attention.self.query", "attention.self.key", "attention.self.value", "attention.output.dense"):
            shapes |= {f"{p}{part}.weight": (HIDDEN, HIDDEN), f"{p}{part}.bias": (HIDDEN,)}
        shapes |= {
            f"{p}intermediate.dense.weight": (INTER, HIDDEN),
            f"{p}intermediate.dense.bias": (INTER,),
            f"{p}output.dense.weight": (HIDDEN, INTER),
            f"{p}output.dense.bias": (HIDDEN,),
        }
        for ln in ("attention.output.LayerNorm", "output.LayerNorm"):
            shapes |= {f"{p}{ln}.weight": (HIDDEN,), f"{p}{ln}.bias": (HIDDEN,)}
    weights = {k: (rng.normal(size=s) * 0.5).astype(np.float32) for k, s in shapes.items()}
    for k in weights:  # LayerNorm scales near 1, as trained models have them
        if k.endswith("LayerNorm.weight"):
            weights[k] = (1 + 0.1 * rng.normal(size=weights[k].shape)).astype(np.float32)
    dest.mkdir(parents=True)
    write_safetensors(dest / "model.safetensors", weights)
    config = {
        "architectures": ["BertForSequenceClassification"],
        "model_type": "bert",
        "hidden_size": HIDDEN,
        "num_attention_heads": HEADS,
        "num_hidden_layers": LAYERS,
        "intermediate_size": INTER,
        "max_position_embeddings": MAX_POS,
        "type_vocab_size": 2,
        "vocab_size": len(vocab),
        "layer_norm_eps": 1e-12,
        "hidden_act": "gelu",
        "num_labels": labels,
        "id2label": {str(i): f"LABEL_{i}" for i in range(labels)},
    }
    (dest / "config.json").write_text(json.dumps(config))
    shutil.copyfile(tokenizer, dest / "tokenizer.json")
    return weights


def numpy_logits(w: dict[str, np.ndarray], ids: list[int], types: list[int]) -> np.ndarray:
    """BertForSequenceClassification at inference, for one unpadded sequence, in float64."""
    w = {k.removeprefix("bert."): v.astype(np.float64) for k, v in w.items()}
    hd = HIDDEN // HEADS

    def ln(x: np.ndarray, p: str) -> np.ndarray:
        normed: np.ndarray = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-12)
        return np.asarray(normed * w[p + ".weight"] + w[p + ".bias"])

    def lin(x: np.ndarray, p: str) -> np.ndarray:
        out: np.ndarray = x @ w[p + ".weight"].T + w[p + ".bias"]
        return out

    s = len(ids)
    x = (
        w["embeddings.word_embeddings.weight"][ids]
        + w["embeddings.position_embeddings.weight"][:s]
        + w["embeddings.token_type_embeddings.weight"][types]
    )
    x = ln(x, "embeddings.LayerNorm")
    for n in range(LAYERS):
        p = f"encoder.layer.{n}."
        q, k, v = (
            lin(x, f"{p}attention.self.{t}").reshape(s, HEADS, hd).transpose(1, 0, 2) for t in ("query", "key", "value")
        )
        att = q @ k.transpose(0, 2, 1) / math.sqrt(hd)
        att = np.exp(att - att.max(-1, keepdims=True))
        ctx = ((att / att.sum(-1, keepdims=True)) @ v).transpose(1, 0, 2).reshape(s, HIDDEN)
        x = ln(lin(ctx, p + "attention.output.dense") + x, p + "attention.output.LayerNorm")
        h = lin(x, p + "intermediate.dense")
        h = 0.5 * h * (1 + np.vectorize(math.erf)(h / math.sqrt(2)))
        x = ln(lin(h, p + "output.dense") + x, p + "output.LayerNorm")
    pooled = np.tanh(lin(x[0], "pooler.dense"))
    return lin(pooled, "classifier")


# --------------------------------------------------------------------------- fixtures


# Its module fixtures are built once, on one worker (`--dist loadgroup`).
pytestmark = pytest.mark.xdist_group("rerank")


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    env = make_env(tmp_path_factory.mktemp("home"))
    env["MEMSEARCH_MODELS_DIR"] = str(tmp_path_factory.mktemp("models"))
    return env


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory, model_dir: Path) -> tuple[Path, dict[str, np.ndarray]]:
    src = tmp_path_factory.mktemp("ckpt") / "tiny-ce"
    return src, make_checkpoint(src, model_dir / "tokenizer.json")


@pytest.fixture(scope="module")
def imported(checkpoint: tuple[Path, dict[str, np.ndarray]], env: dict[str, str]) -> Path:
    """The checkpoint imported with the real CLI, under the name ``tiny-ce``."""
    proc = ok(run(["model", "import", str(checkpoint[0]), "--name", "tiny-ce"], env))
    assert "--reranker-model tiny-ce" in proc.stdout
    out = Path(env["MEMSEARCH_MODELS_DIR"]) / "tiny-ce"
    assert (out / "onnx" / "model.onnx").is_file() and (out / "onnx" / "model_quantized.onnx").is_file()
    assert not (out / "1_Pooling").exists()  # not an embedding model
    return out


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory, env: dict[str, str], model_dir: Path) -> Iterator[list[str]]:
    """A Milvus Lite index of 25 short sections; the common search flags."""
    notes = tmp_path_factory.mktemp("notes")
    for f in range(5):
        body = [f"# Notes {f}\n"]
        for topic in TOPICS[f * 5 : f * 5 + 5]:
            body.append(f"## {topic.title()}\n\nWe wrote down how the {topic} works and what broke last time.\n")
        (notes / f"notes{f}.md").write_text("\n".join(body))
    db = tmp_path_factory.mktemp("db") / "m.db"
    common = ["--milvus-uri", str(db), "-m", str(model_dir)]
    ok(run(["index", str(notes), *common], env))
    yield common
    from memsearch_fast.lite import broker as lite_broker

    lite_broker.stop_server(str(db))


def search(env: dict[str, str], *args: str) -> Any:
    return json.loads(ok(run(["search", QUERY, "-j", *args], env)).stdout)


# --------------------------------------------------------------------------- the graph


def test_imported_cross_encoder_matches_numpy(
    imported: Path, checkpoint: tuple[Path, dict[str, np.ndarray]], env: dict[str, str]
) -> None:
    weights = checkpoint[1]
    # Found by directory and by imported name: one session per process and file.
    by_dir = rerank.load(str(imported), quantized=False, threads=1)
    by_name = rerank.load("tiny-ce", quantized=False, threads=1, cache_dir=env["MEMSEARCH_MODELS_DIR"])
    assert by_name is by_dir and by_dir.model_path == imported / "onnx" / "model.onnx"
    assert by_dir.max_length == MAX_POS
    texts = [
        "Roll back with make rollback and page the on-call.",
        "Braise the onions slowly.",
        "",
        " ".join(["the search service deploys from the release branch"] * 30),  # truncated to MAX_POS
    ]
    got = by_dir.logits(QUERY, texts)
    enc = by_dir._tokenizer.encode_batch([(QUERY, t) for t in texts])
    assert max(len(e.ids) for e in enc) == MAX_POS and {0, 1} <= set(enc[0].type_ids)
    want = np.array([numpy_logits(weights, e.ids, e.type_ids)[0] for e in enc])
    assert np.allclose(got, want, atol=1e-4), (got, want)
    # The token types reach the graph: the same pairs with type 0 throughout score differently.
    flat = np.array([numpy_logits(weights, e.ids, [0] * len(e.ids))[0] for e in enc])
    assert np.abs(flat - want).max() > 1e-2
    # The int8 file (the default) scores the same pairs close to fp32 (dynamic
    # quantisation of a random model, 7-bit weights: a looser bound, the same trend).
    # Full-range weights overflowed on a CPU without VNNI (correlation -0.61).
    int8 = rerank.load(str(imported), threads=1)
    assert int8.model_path.name == "model_quantized.onnx"
    quantized = int8.logits(QUERY, texts)
    assert np.corrcoef(quantized, want)[0, 1] > 0.95 and np.abs(quantized - want).max() < 0.4 * np.ptp(want)


def test_two_logit_head_scores_the_positive_class(tmp_path: Path, model_dir: Path) -> None:
    from memsearch_fast.embeddings.models import import_model

    weights = make_checkpoint(tmp_path / "ce2", model_dir / "tokenizer.json", labels=2, seed=5)
    out = import_model(tmp_path / "ce2", cache_dir=tmp_path / "cache", quantize=False)
    ce = rerank.load(str(out), threads=1)
    texts = ["rollback steps", "bread dough", "deploy keys"]
    enc = ce._tokenizer.encode_batch([(QUERY, t) for t in texts])
    raw = np.array([numpy_logits(weights, e.ids, e.type_ids) for e in enc])
    assert np.allclose(ce.logits(QUERY, texts), raw[:, 1] - raw[:, 0], atol=1e-4)
    hits = [{"content": t, "chunk_hash": str(i), "score": 0.5} for i, t in enumerate(texts)]
    ranked = ce.rerank(QUERY, hits, top_k=2)
    assert len(ranked) == 2
    best = int(np.argmax(raw[:, 1] - raw[:, 0]))
    softmax = np.exp(raw[best]) / np.exp(raw[best]).sum()
    assert ranked[0]["chunk_hash"] == str(best) and math.isclose(ranked[0]["score"], softmax[1], rel_tol=1e-4)


# --------------------------------------------------------------------------- search


@pytest.mark.slow(reason="converts a cross-encoder and searches through the CLI")
def test_search_reranks_the_fused_candidates(index: list[str], imported: Path, env: dict[str, str]) -> None:
    fused = search(env, *index, "-k", str(rerank.candidate_count(3)))
    assert len(fused) == rerank.candidate_count(3) == 20
    hits = search(env, *index, "-k", "3", "--reranker-model", str(imported))
    assert len(hits) == 3
    # The reranker's order over the fused top 20: computed here on the same int8 model.
    ce = rerank.load(str(imported))
    logits = ce.logits(QUERY, [h["content"] for h in fused])
    want = [fused[i]["chunk_hash"] for i in np.argsort(-logits, kind="stable")[:3]]
    assert [h["chunk_hash"] for h in hits] == want
    assert want != [h["chunk_hash"] for h in fused[:3]]  # the reranker changed the order
    for hit in hits:
        assert math.isclose(hit["score"], 1 / (1 + math.exp(-hit["rerank_score"])), rel_tol=1e-9)
    scores = [h["rerank_score"] for h in hits]
    assert scores == sorted(scores, reverse=True)
    by_hash = dict(zip((h["chunk_hash"] for h in fused), logits, strict=True))
    assert all(math.isclose(h["rerank_score"], by_hash[h["chunk_hash"]], abs_tol=1e-6) for h in hits)

    # --explain: the text line and the JSON both carry the reranker's score and the fused rank.
    explained = search(env, *index, "-k", "3", "--reranker-model", str(imported), "--explain")
    fused_rank = {h["chunk_hash"]: i for i, h in enumerate(fused, 1)}
    for hit in explained:
        e = hit["explain"]
        assert e["rerank_score"] == hit["rerank_score"] and e["fused_rank"] == fused_rank[hit["chunk_hash"]]
    text = ok(run(["search", QUERY, "-k", "3", "--reranker-model", str(imported), "--explain", *index], env)).stdout
    why = [line for line in text.splitlines() if line.startswith("Why:")]
    assert len(why) == 3
    first = explained[0]
    assert f"rerank {first['rerank_score']:.4f} (logit; fused #{first['explain']['fused_rank']})" in why[0]
    assert f"score: {first['score']:.4f}" in text

    # --digest -j keeps the reranker's score too.
    digest = search(env, *index, "-k", "3", "--reranker-model", "tiny-ce", "--digest")
    assert [h["rerank_score"] for h in digest["results"]] == scores  # found by its imported name


def test_config_key_and_empty_string_disables(index: list[str], imported: Path, env: dict[str, str]) -> None:
    home = Path(env["HOME"])
    (home / ".memsearch").mkdir(exist_ok=True)
    (home / ".memsearch" / "config.toml").write_text(f'[reranker]\nmodel = "{imported}"\n')
    try:
        configured = search(env, *index, "-k", "3")
        assert all("rerank_score" in h for h in configured)
        off = search(env, *index, "-k", "3", "--reranker-model", "")
        plain = search(env, *index, "-k", "3", "--reranker-model", "", "--explain")
    finally:
        (home / ".memsearch" / "config.toml").unlink()
    assert off == search(env, *index, "-k", "3")  # the default is off
    assert all("rerank_score" not in h and "rerank_score" not in h["explain"] for h in plain)
    assert [h["chunk_hash"] for h in configured] != [h["chunk_hash"] for h in off]


def test_mcp_search_uses_the_configured_reranker(
    index: list[str], imported: Path, env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The MCP server's memory_search reads reranker.model like search does."""
    from memsearch_fast.api import MemSearch
    from memsearch_fast.serve.mcp import Recall

    monkeypatch.setenv("HOME", env["HOME"])
    monkeypatch.chdir(tmp_path)
    cli = search(env, *index, "-k", "3", "--reranker-model", str(imported))
    uri, model = index[1], index[3]
    cfg = cfgmod.resolve({"milvus.uri": uri, "embedding.model": model, "reranker.model": str(imported)})

    async def call() -> Any:
        tools = Recall(lambda: MemSearch.from_config(cfg), "missing")
        try:
            (content,) = await tools.call("memory_search", {"query": QUERY, "top_k": 3})
        finally:
            tools.close()
        return json.loads(content.text)

    assert asyncio.run(call()) == cli


# --------------------------------------------------------------------------- bad values


@pytest.mark.slow(reason="converts a cross-encoder and searches through the CLI")
def test_bad_reranker_values_are_one_line_errors(
    index: list[str], imported: Path, env: dict[str, str], model_dir: Path, tmp_path: Path
) -> None:
    def fails(value: str, *needles: str) -> None:
        one_line_error(run(["search", QUERY, *index, "--reranker-model", value], env), "Error:", *needles)

    fails(str(tmp_path / "nope"), "reranker model", "does not exist")
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "notes.txt").write_text("not a model")
    fails(str(tmp_path / "junk"), "not an ONNX model directory")
    fails(str(model_dir), "is not a cross-encoder", "last_hidden_state")  # an embedding model: no head
    fails("nobody/no-such-reranker", "reranker model 'nobody/no-such-reranker' not found")  # offline hub id
    fails("not-imported-yet", "reranker model 'not-imported-yet' not found")
    # The other way round: a cross-encoder is no embedding model.
    one_line_error(run(["search", QUERY, "--milvus-uri", index[1], "-m", str(imported)], env), "cross-encoder")


def test_library_errors(tmp_path: Path, checkpoint: tuple[Path, dict[str, np.ndarray]]) -> None:
    with pytest.raises(RerankerError, match="no reranker model"):
        rerank.load("")
    src = tmp_path / "headless"
    shutil.copytree(checkpoint[0], src)
    from memsearch_fast.embeddings.convert import read_safetensors
    from memsearch_fast.embeddings.models import import_model

    tensors = {k: np.array(v) for k, v in read_safetensors(src / "model.safetensors").items()}
    write_safetensors(src / "model.safetensors", {k: v for k, v in tensors.items() if not k.startswith("bert.pooler")})
    with pytest.raises(ModelConversionError, match=r"pooler\.dense") as info:
        import_model(src, cache_dir=tmp_path / "cache")
    assert "\n" not in str(info.value)


def test_candidate_count() -> None:
    assert [rerank.candidate_count(k) for k in (1, 5, 7, 10, 16, 17, 40, 60, 200)] == [
        20, 20, 21, 30, 48, 50, 50, 60, 200
    ]  # fmt: skip
