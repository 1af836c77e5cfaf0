"""Reranking latency: 20 chunk-sized candidates scored by a cross-encoder.

Run (benchmarks are disabled by default in pytest's addopts):

    PYTHONPATH=python python3 -m pytest benches/bench_rerank.py --benchmark-enable \
        --benchmark-columns=min,median,rounds -s -q

The cross-encoders have random weights (fixed seed) and go through the same
path as a real checkpoint: a BertForSequenceClassification safetensors
checkpoint written here, converted by ``memsearch model import``'s code
(fp32 and int8), loaded by ``memsearch_fast.recall.rerank.load``. Two sizes:
MiniLM-L6 (6 layers, hidden 384, 12 heads, intermediate 1536: the size of
ms-marco-MiniLM-L6-v2) and TinyBERT-L2 (2 layers, hidden 128, 2 heads,
intermediate 512: the size of ms-marco-TinyBERT-L2-v2). The tokenizer is the
shared model's (the same BERT uncased vocabulary). Each round scores one
query against the same 20 generated chunks of 300-1500 characters, as one
``search -k 5`` reranks them; ``MEMSEARCH_BENCH_THREADS`` sets the intra-op
threads (default 2).
"""

from __future__ import annotations

import json
import os
import shutil
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from benches.bench_embeddings import MODEL_DIR, make_chunks

THREADS = int(os.environ.get("MEMSEARCH_BENCH_THREADS", "2"))
ROUNDS = int(os.environ.get("MEMSEARCH_BENCH_RERANK_ROUNDS", "15"))
QUERY = "how do we roll back a failed deploy of the search service"
#: name -> (layers, hidden, heads, intermediate)
SIZES = {"minilm-l6": (6, 384, 12, 1536), "tinybert-l2": (2, 128, 2, 512)}

if not (MODEL_DIR / "tokenizer.json").is_file():
    pytest.skip(f"tokenizer not found at {MODEL_DIR}", allow_module_level=True)


def _write_safetensors(path: Path, tensors: dict[str, np.ndarray]) -> None:
    header: dict[str, Any] = {}
    offset = 0
    for name, arr in tensors.items():
        header[name] = {"dtype": "F32", "shape": list(arr.shape), "data_offsets": [offset, offset + arr.nbytes]}
        offset += arr.nbytes
    head = json.dumps(header).encode()
    head += b" " * (-len(head) % 8)
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(head)) + head)
        for arr in tensors.values():
            fh.write(np.ascontiguousarray(arr, dtype="<f4").tobytes())


def write_cross_encoder(dest: Path, layers: int, hidden: int, heads: int, inter: int) -> Path:
    """A random BertForSequenceClassification checkpoint (one logit) in transformers' layout."""
    vocab = len(json.loads((MODEL_DIR / "tokenizer.json").read_text())["model"]["vocab"])
    rng = np.random.default_rng(0)
    shapes: dict[str, tuple[int, ...]] = {
        "bert.embeddings.word_embeddings.weight": (vocab, hidden),
        "bert.embeddings.position_embeddings.weight": (512, hidden),
        "bert.embeddings.token_type_embeddings.weight": (2, hidden),
        "bert.embeddings.LayerNorm.weight": (hidden,),
        "bert.embeddings.LayerNorm.bias": (hidden,),
        "bert.pooler.dense.weight": (hidden, hidden),
        "bert.pooler.dense.bias": (hidden,),
        "classifier.weight": (1, hidden),
        "classifier.bias": (1,),
    }
    for n in range(layers):
        p = f"bert.encoder.layer.{n}."
        for part in ("attention.self.query", "attention.self.key", "attention.self.value", "attention.output.dense"):
            shapes |= {f"{p}{part}.weight": (hidden, hidden), f"{p}{part}.bias": (hidden,)}
        shapes |= {
            f"{p}intermediate.dense.weight": (inter, hidden),
            f"{p}intermediate.dense.bias": (inter,),
            f"{p}output.dense.weight": (hidden, inter),
            f"{p}output.dense.bias": (hidden,),
        }
        for ln in ("attention.output.LayerNorm", "output.LayerNorm"):
            shapes |= {f"{p}{ln}.weight": (hidden,), f"{p}{ln}.bias": (hidden,)}
    tensors = {k: (rng.normal(size=s) * 0.05).astype(np.float32) for k, s in shapes.items()}
    for k in tensors:
        if k.endswith("LayerNorm.weight"):
            tensors[k] += 1.0
    dest.mkdir(parents=True)
    _write_safetensors(dest / "model.safetensors", tensors)
    config = {
        "architectures": ["BertForSequenceClassification"],
        "model_type": "bert",
        "hidden_size": hidden,
        "num_attention_heads": heads,
        "num_hidden_layers": layers,
        "intermediate_size": inter,
        "max_position_embeddings": 512,
        "type_vocab_size": 2,
        "vocab_size": vocab,
        "hidden_act": "gelu",
        "num_labels": 1,
    }
    (dest / "config.json").write_text(json.dumps(config))
    shutil.copyfile(MODEL_DIR / "tokenizer.json", dest / "tokenizer.json")
    return dest


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each size imported into a temporary model cache (fp32 + int8)."""
    from memsearch_fast.embeddings.models import import_model

    root = tmp_path_factory.mktemp("rerank-models")
    return {
        name: import_model(write_cross_encoder(root / "src" / name, *dims), name=name, cache_dir=root / "cache")
        for name, dims in SIZES.items()
    }


@pytest.fixture(scope="module")
def candidates() -> list[str]:
    found = [c for c in make_chunks(400) if 300 <= len(c) <= 1500][:20]
    assert len(found) == 20
    return found


def _record(benchmark: Any, name: str, tokens: list[int]) -> None:
    stats = benchmark.stats.stats
    load = os.getloadavg()[0]
    benchmark.extra_info |= {
        "p50_ms": round(stats.median * 1000, 1),
        "min_ms": round(stats.min * 1000, 1),
        "threads": THREADS,
        "pair_tokens_mean": round(sum(tokens) / len(tokens)),
        "pair_tokens_max": max(tokens),
        "load_avg_1m": round(load, 2),
    }
    print(
        f"\n{name}: p50 {stats.median * 1000:.0f} ms, min {stats.min * 1000:.0f} ms for 20 pairs "
        f"({sum(tokens) / len(tokens):.0f} tokens mean, {max(tokens)} max; {THREADS} threads; load {load:.2f})"
    )


@pytest.mark.parametrize("size", list(SIZES))
@pytest.mark.parametrize("precision", ["fp32", "int8"])
def test_rerank_20_candidates(
    benchmark: Any, models: dict[str, Path], candidates: list[str], size: str, precision: str
) -> None:
    from memsearch_fast.recall import rerank

    ce = rerank.load(str(models[size]), quantized=precision == "int8", threads=THREADS)
    assert ce.model_path.name == ("model_quantized.onnx" if precision == "int8" else "model.onnx")
    ce.logits(QUERY, candidates)  # warm-up
    scores = benchmark.pedantic(ce.logits, args=(QUERY, candidates), rounds=ROUNDS, iterations=1)
    assert scores.shape == (20,) and np.isfinite(scores).all()
    tokens = [len(e.ids) for e in ce._tokenizer.encode_batch([(QUERY, c) for c in candidates])]
    _record(benchmark, f"{size}-{precision}", tokens)


@pytest.mark.parametrize("budget", ["default", "one-run"])
def test_batching(
    benchmark: Any, models: dict[str, Path], candidates: list[str], budget: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Why ``ATTENTION_BUDGET``: the 20 pairs in runs of similar length against one run padded to the longest."""
    from memsearch_fast.recall import rerank

    if budget == "one-run":
        monkeypatch.setattr(rerank, "ATTENTION_BUDGET", 20 * 512 * 512)
    ce = rerank.load(str(models["minilm-l6"]), threads=THREADS)
    ce.logits(QUERY, candidates)
    benchmark.pedantic(ce.logits, args=(QUERY, candidates), rounds=max(3, ROUNDS // 3), iterations=1)
    tokens = [len(e.ids) for e in ce._tokenizer.encode_batch([(QUERY, c) for c in candidates])]
    _record(benchmark, f"minilm-l6-int8 batching={budget}", tokens)
