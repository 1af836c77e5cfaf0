"""Embedding throughput (chunks/s) of the onnx provider against a naive baseline.

Run (benchmarks are disabled by default in pytest's addopts):

    PYTHONPATH=python python3 -m pytest benches/bench_embeddings.py --benchmark-enable \
        --benchmark-columns=min,rounds -s -q

The baseline is what memsearch 0.4.23 does with an ONNX model: one
onnxruntime session with default options, fixed batches of 32 in input order,
padding to the longest text of each batch, mean pooling, ``.tolist()``. Both
sides use the same model file and truncate at the model's 256 tokens. Each
case embeds the same 2,000 generated markdown chunks once per round.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
from pathlib import Path

import numpy as np
import pytest

MODEL_DIR = Path(
    os.environ.get("MEMSEARCH_TEST_MODEL_DIR")
    or Path(__file__).resolve().parents[1].parent / "shared" / "models" / "all-MiniLM-L6-v2-onnx"
)
N_CHUNKS = int(os.environ.get("MEMSEARCH_BENCH_CHUNKS", "2000"))
ROUNDS = int(os.environ.get("MEMSEARCH_BENCH_ROUNDS", "1"))
FILES = {"fp32": "onnx/model.onnx", "int8": "onnx/model_quantized.onnx"}

if not (MODEL_DIR / FILES["fp32"]).is_file():
    pytest.skip(f"benchmark model not found at {MODEL_DIR}", allow_module_level=True)

_WORDS = (
    "index chunk embedding vector milvus collection session memory agent hook deploy rollback cache redis "
    "postgres migration schema query latency throughput batch worker queue retry timeout token budget "
    "refactor test fixture coverage release tag branch merge conflict review config env secret rotate "
    "endpoint handler router middleware auth jwt cookie cors header payload parser markdown heading "
    "paragraph summary decision tradeoff benchmark profile flamegraph allocation leak thread async await"
).split()


def _sentence(rng: random.Random) -> str:
    words = [rng.choice(_WORDS) for _ in range(rng.randint(5, 18))]
    if rng.random() < 0.3:
        words.insert(rng.randrange(len(words)), f"`{rng.choice(_WORDS)}_{rng.randint(1, 99)}()`")
    if rng.random() < 0.2:
        words.append(f"(see #{rng.randint(10, 999)})")
    return " ".join(words).capitalize() + "."


def make_chunks(n: int = N_CHUNKS, seed: int = 20240601) -> list[str]:
    """Deterministic markdown-ish daily-log and doc chunks of 50-1500 characters.

    Half the lengths are log-uniform (many short log entries), half uniform
    (doc paragraphs), which is roughly what a memory folder chunks into.
    """
    rng = random.Random(seed)
    chunks = []
    for i in range(n):
        target = int(50 * 30 ** rng.random()) if i % 2 else rng.randint(50, 1500)
        kind = rng.random()
        if kind < 0.4:
            parts = [f"## {2024 + i % 2}-{1 + i % 12:02d}-{1 + i % 28:02d} session {i}"]
            while sum(map(len, parts)) < target:
                parts.append(f"- {_sentence(rng)}")
        elif kind < 0.8:
            parts = [f"### {rng.choice(_WORDS).title()} {rng.choice(_WORDS)}"]
            while sum(map(len, parts)) < target:
                parts.append(_sentence(rng))
        else:
            parts = [f"Decision: {_sentence(rng)}", "```python", f"def {rng.choice(_WORDS)}_{i}(x):"]
            while sum(map(len, parts)) < target:
                parts.append(f"    return {rng.choice(_WORDS)}(x, retries={rng.randint(1, 9)})  # {_sentence(rng)}")
            parts.append("```")
        chunks.append("\n".join(parts)[: max(50, target)])
    return chunks


class NaiveEmbedder:
    """The reference loop: default session, batches of 32 in input order, pad to longest."""

    def __init__(self, model_file: Path) -> None:
        import onnxruntime as ort
        from tokenizers import Tokenizer

        self.session = ort.InferenceSession(str(model_file), providers=["CPUExecutionProvider"])
        self.tokenizer = Tokenizer.from_file(str(MODEL_DIR / "tokenizer.json"))
        self.tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
        self.tokenizer.enable_truncation(max_length=256)

    def embed(self, texts: list[str]) -> list[list[float]]:
        out: list[list[float]] = []
        for i in range(0, len(texts), 32):
            enc = self.tokenizer.encode_batch(texts[i : i + 32])
            ids = np.array([e.ids for e in enc], dtype=np.int64)
            mask = np.array([e.attention_mask for e in enc], dtype=np.int64)
            hidden = self.session.run(
                None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
            )[0]
            pooled = (hidden * mask[..., None]).sum(1) / mask.sum(1, keepdims=True)
            out.extend((pooled / np.linalg.norm(pooled, axis=1, keepdims=True)).tolist())
        return out


_RESULTS: dict[str, np.ndarray] = {}


@pytest.fixture(scope="module")
def chunks() -> list[str]:
    return make_chunks()


def _record(benchmark, name: str, chunks: list[str], vectors: list[list[float]]) -> None:
    _RESULTS[name] = np.asarray(vectors, dtype=np.float32)
    best = benchmark.stats.stats.min
    benchmark.extra_info["chunks_per_s"] = round(len(chunks) / best, 1)
    benchmark.extra_info["load_avg_1m"] = round(os.getloadavg()[0], 2)
    print(f"\n{name}: {len(chunks) / best:.1f} chunks/s ({best:.1f} s, load {os.getloadavg()[0]:.2f})")


@pytest.mark.parametrize("precision", ["fp32", "int8"])
def test_naive_baseline(benchmark, chunks: list[str], precision: str) -> None:
    naive = NaiveEmbedder(MODEL_DIR / FILES[precision])
    naive.embed(chunks[:32])  # warm-up
    vectors = benchmark.pedantic(naive.embed, args=(chunks,), rounds=ROUNDS, iterations=1)
    _record(benchmark, f"naive-{precision}", chunks, vectors)


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("precision", ["fp32", "int8"])
def test_onnx_provider(benchmark, chunks: list[str], precision: str, workers: int) -> None:
    from memsearch_fast.embeddings import get_provider
    from memsearch_fast.parallelism import plan

    # plan(workers): the cores are shared out so that workers x threads = available CPUs.
    provider = get_provider("onnx", model=str(MODEL_DIR), quantized=precision == "int8", parallelism=plan(workers))
    try:
        asyncio.run(provider.embed(chunks[:32]))  # warm-up
        vectors = benchmark.pedantic(lambda: asyncio.run(provider.embed(chunks)), rounds=ROUNDS, iterations=1)
    finally:
        provider.close()
    name = f"onnx-{precision}-w{workers}"
    _record(benchmark, name, chunks, vectors)
    naive = _RESULTS.get(f"naive-{precision}")
    if naive is not None:
        cos = (naive * _RESULTS[name]).sum(1)
        benchmark.extra_info["min_cos_vs_naive"] = round(float(cos.min()), 6)
    fp32 = _RESULTS.get(f"onnx-fp32-w{workers}")
    if precision == "int8" and fp32 is not None:
        cos = (fp32 * _RESULTS[name]).sum(1)
        benchmark.extra_info["int8_cos_vs_fp32_mean"] = round(float(cos.mean()), 5)
        benchmark.extra_info["int8_cos_vs_fp32_min"] = round(float(cos.min()), 5)
        print(f"int8 vs fp32 cosine: mean {cos.mean():.5f} min {cos.min():.5f}")


def test_tolist_cost(benchmark, chunks: list[str]) -> None:
    """What converting one call's result to Python floats costs (paid off the event loop)."""
    arr = np.random.default_rng(0).normal(size=(len(chunks), 384)).astype(np.float32)
    result = benchmark.pedantic(arr.tolist, rounds=5, iterations=1)
    assert len(result) == len(chunks)
    benchmark.extra_info["ms"] = round(benchmark.stats.stats.min * 1000, 2)


if __name__ == "__main__":  # quick look at the corpus
    texts = make_chunks()
    lengths = sorted(map(len, texts))
    print(
        json.dumps(
            {
                "n": len(texts),
                "min": lengths[0],
                "median": lengths[len(lengths) // 2],
                "max": lengths[-1],
                "mean": round(sum(lengths) / len(lengths)),
            }
        )
    )
    print(texts[0][:300], "\n---\n", texts[1][:300])
