"""ONNX provider on the real all-MiniLM-L6-v2 export: reference embeddings, pooling, concurrency."""

from __future__ import annotations

import asyncio
import json
import random
import shutil
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from tokenizers import Tokenizer

from memsearch_fast.embeddings import (
    EmbeddingError,
    EmbeddingProvider,
    ModelNotFoundError,
    UnknownProviderError,
    get_provider,
)
from memsearch_fast.embeddings.onnx import OnnxEmbedding
from memsearch_fast.parallelism import available_cpus, plan
from tests.helpers.model import MISSING, find_model_dir, reference_embeddings

_found = find_model_dir()
if _found is None:
    pytest.fail(MISSING, pytrace=False)
MODEL_DIR: Path = _found
REFERENCE = reference_embeddings()


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


def embed(provider: EmbeddingProvider, texts: list[str]) -> np.ndarray:
    return np.asarray(asyncio.run(provider.embed(texts)))


def varied_texts(n: int, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    words = "memory index chunk vector milvus session decision bug fix deploy cache redis token".split()
    return [" ".join(rng.choice(words) for _ in range(rng.randint(1, 60))) + f" #{i}" for i in range(n)]


def tokenizer(max_length: int = 256) -> Tokenizer:
    """The model's tokenizer without the fixed padding its tokenizer.json asks for."""
    tok = Tokenizer.from_file(str(MODEL_DIR / "tokenizer.json"))
    tok.no_padding()
    tok.enable_truncation(max_length=max_length)
    return tok


@pytest.fixture(scope="module")
def fp32() -> OnnxEmbedding:
    p = get_provider("onnx", model=str(MODEL_DIR), quantized=False, batch_size=4, workers=2)
    yield p
    p.close()


@pytest.fixture(scope="module")
def int8() -> OnnxEmbedding:
    p = get_provider("onnx", model=str(MODEL_DIR))  # defaults: int8 file, one text per call
    yield p
    p.close()


def test_reference_embeddings_fp32(fp32: OnnxEmbedding) -> None:
    assert isinstance(fp32, EmbeddingProvider)
    assert fp32.model_path.relative_to(MODEL_DIR).as_posix() == "onnx/model.onnx"
    assert fp32.dimension == 384 and fp32.max_seq_length == REFERENCE["max_seq_length"]
    got = embed(fp32, REFERENCE["texts"])
    cos = cosines(got, np.asarray(REFERENCE["embeddings"]))
    assert cos.min() >= 0.9999, dict(zip(REFERENCE["texts"], cos.round(6), strict=True))
    assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)


def test_reference_embeddings_int8_is_the_default(int8: OnnxEmbedding) -> None:
    assert int8.model_path.relative_to(MODEL_DIR).as_posix() == "onnx/model_quantized.onnx"
    cos = cosines(embed(int8, REFERENCE["texts"]), np.asarray(REFERENCE["embeddings"]))
    assert cos.min() >= 0.97, dict(zip(REFERENCE["texts"], cos.round(4), strict=True))


def test_vectors_are_python_floats_in_input_order(fp32: OnnxEmbedding) -> None:
    texts = varied_texts(23)
    vectors = asyncio.run(fp32.embed(texts))
    assert len(vectors) == 23 and all(type(v) is list and type(v[0]) is float for v in vectors)
    one_by_one = np.asarray([asyncio.run(fp32.embed_query(t)) for t in texts[:5]])
    assert np.allclose(np.asarray(vectors[:5]), one_by_one, atol=1e-5)
    shuffled = list(range(23))
    random.Random(1).shuffle(shuffled)
    again = embed(fp32, [texts[i] for i in shuffled])
    assert np.allclose(again, np.asarray(vectors)[shuffled], atol=1e-5)


def test_large_calls_are_processed_in_windows(fp32: OnnxEmbedding, monkeypatch: pytest.MonkeyPatch) -> None:
    import memsearch_fast.embeddings.onnx as onnx_module

    texts = varied_texts(23, seed=11)
    whole = fp32.embed_sync(texts)
    monkeypatch.setattr(onnx_module, "WINDOW", 7)  # 4 windows, the last one partial
    assert np.allclose(embed(fp32, texts), whole, atol=1e-5)
    assert np.allclose(fp32.embed_sync(texts), whole, atol=1e-5)


def test_long_texts_go_in_smaller_batches(fp32: OnnxEmbedding) -> None:
    """Rows x length^2 per inference batch is bounded, so the arena stays small;
    short texts still fill the configured batch size."""
    from memsearch_fast.embeddings import onnx as onnx_module

    int8 = OnnxEmbedding(str(MODEL_DIR), batch_size=32, workers=1)
    long_texts = ["word " * 400] * 40  # truncated to max_seq_length tokens each
    short_texts = ["a short note"] * 40
    long_batches = int8._plan(long_texts, 0)
    short_batches = int8._plan(short_texts, 0)
    assert all(b.ids.shape[1] == int8.max_seq_length for b in long_batches)
    assert max(b.ids.shape[0] for b in long_batches) * int8.max_seq_length**2 <= onnx_module.ATTENTION_BUDGET
    assert max(b.ids.shape[0] for b in short_batches) == int8.batch_size
    assert sum(b.ids.shape[0] for b in long_batches) == 40
    # Same vectors whatever the batch sizes (fp32: int8's dynamic quantisation
    # scales by the batch, so its vectors move slightly with the batch anyway).
    mixed = asyncio.run(fp32.embed([*long_texts[:3], *short_texts[:3]]))
    alone = [asyncio.run(fp32.embed([t]))[0] for t in (long_texts[0], short_texts[0])]
    for got, want in ((mixed[0], alone[0]), (mixed[3], alone[1])):
        assert sum(a * b for a, b in zip(got, want, strict=True)) > 0.9999
    int8.close()


@pytest.mark.slow(reason="embeds many texts in many batch layouts with the real model")
def test_an_int8_vector_does_not_depend_on_its_batch_mates(int8: OnnxEmbedding) -> None:
    """A text's int8 vector is the same alone (a query), among all the texts of a run, and
    with short or long mates: a repaired index equals a clean one vector for vector.

    In batches, onnxruntime's dynamic quantisation takes one activation scale per
    call, and the same texts moved to cosine 0.98-0.99 of themselves.
    """
    texts = varied_texts(40, seed=23)
    short, long = ["a note"] * 7, ["word " * 300] * 3
    alone = np.vstack([int8.embed_sync([t]) for t in texts])
    company = {
        "all together": embed(int8, texts),
        "short mates": np.vstack([embed(int8, [t, *short])[:1] for t in texts]),
        "long mates": np.vstack([embed(int8, [t, *long])[:1] for t in texts]),
    }
    for name, got in company.items():
        assert cosines(got, alone).min() >= 0.9999, name
    with OnnxEmbedding(str(MODEL_DIR), batch_size=32, workers=1) as batched:
        moved = cosines(batched.embed_sync(texts), np.vstack([batched.embed_sync([t]) for t in texts]))
    assert moved.min() < 0.999  # what one text per call avoids


def test_concurrent_calls_each_get_their_own_results_in_order(fp32: OnnxEmbedding) -> None:
    lists = [varied_texts(17, seed=s) for s in range(4)]
    expected = [fp32.embed_sync(texts) for texts in lists]

    async def main() -> list[list[list[float]]]:
        return await asyncio.gather(*(fp32.embed(texts) for texts in lists))

    for got, want in zip(asyncio.run(main()), expected, strict=True):
        assert np.allclose(np.asarray(got), want, atol=1e-5)


def test_event_loop_stays_responsive(fp32: OnnxEmbedding) -> None:
    texts = varied_texts(64, seed=3)

    async def main() -> tuple[float, float]:
        gaps: list[float] = []
        done = asyncio.Event()

        async def ticker() -> None:
            last = time.perf_counter()
            while not done.is_set():
                await asyncio.sleep(0.005)
                now = time.perf_counter()
                gaps.append(now - last)
                last = now

        tick = asyncio.create_task(ticker())
        start = time.perf_counter()
        await fp32.embed(texts)
        total = time.perf_counter() - start
        done.set()
        await tick
        return max(gaps), total

    worst_gap, total = asyncio.run(main())
    assert worst_gap < max(0.25, total / 3), (worst_gap, total)  # inference ran off the loop


def test_long_empty_and_odd_unicode_texts(fp32: OnnxEmbedding) -> None:
    base = " ".join(f"word{i}" for i in range(400))  # far beyond 256 tokens already
    texts = [
        base,
        base + " tail" * 20_000,
        "",
        "   \n\t ",
        "\x00\x01\x1f control",
        "lone surrogate \ud800 here",
        "e\u0301\u0301 combining, RTL \u05e9\u05dc\u05d5\u05dd, ZWJ 👩\u200d💻, \ufeffBOM",
        "🚀" * 5000,
    ]
    got = embed(fp32, texts)
    assert got.shape == (len(texts), 384) and np.isfinite(got).all()
    assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    assert np.allclose(got[0], got[1], atol=1e-5)  # truncated at max_seq_length: the tail is ignored
    empty_ref = np.asarray(REFERENCE["embeddings"][REFERENCE["texts"].index("")])
    assert cosines(got[2:3], empty_ref[None])[0] >= 0.9999


def test_max_seq_length_option_truncates(tmp_path: Path) -> None:
    with OnnxEmbedding(str(MODEL_DIR), quantized=False, max_seq_length=16, workers=1) as p:
        assert p.max_seq_length == 16
        got = np.asarray(asyncio.run(p.embed(["alpha beta gamma " * 40])))
    tok = tokenizer(16)
    ids = np.asarray([tok.encode("alpha beta gamma " * 40).ids], dtype=np.int64)
    assert ids.shape == (1, 16)
    sess = ort.InferenceSession(str(MODEL_DIR / "onnx" / "model.onnx"), providers=["CPUExecutionProvider"])
    feed = {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}
    hidden = sess.run(None, feed)[0]
    assert cosines(got, hidden.mean(axis=1))[0] >= 0.9999


def link_model_dir(tmp_path: Path, pooling: dict[str, bool]) -> Path:
    """A model dir sharing the real ONNX file, with its own pooling config."""
    d = tmp_path / "model"
    (d / "onnx").mkdir(parents=True)
    (d / "onnx" / "model.onnx").symlink_to(MODEL_DIR / "onnx" / "model.onnx")
    for name in ("tokenizer.json", "config.json", "sentence_bert_config.json"):
        shutil.copyfile(MODEL_DIR / name, d / name)
    (d / "1_Pooling").mkdir()
    (d / "1_Pooling" / "config.json").write_text(json.dumps(pooling))
    return d


def test_cls_pooling_from_config(tmp_path: Path) -> None:
    d = link_model_dir(
        tmp_path, {"word_embedding_dimension": 384, "pooling_mode_cls_token": True, "pooling_mode_mean_tokens": False}
    )
    texts = ["short", "a somewhat longer sentence about Milvus collections and hybrid search"]
    with get_provider("onnx", model=str(d), batch_size=2, workers=1) as p:
        got = embed(p, texts)
    tok = tokenizer()
    sess = ort.InferenceSession(str(MODEL_DIR / "onnx" / "model.onnx"), providers=["CPUExecutionProvider"])
    for text, vec in zip(texts, got, strict=True):
        ids = np.asarray([tok.encode(text).ids], dtype=np.int64)
        hidden = sess.run(
            None, {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}
        )[0]
        assert cosines(vec[None], hidden[:, 0])[0] >= 0.9999


def test_unsupported_pooling_is_a_clear_error(tmp_path: Path) -> None:
    d = link_model_dir(tmp_path, {"pooling_mode_weightedmean_tokens": True})
    with pytest.raises(EmbeddingError, match="unsupported pooling"):
        OnnxEmbedding(str(d))


def test_pooled_output_is_used_as_is_and_inputs_come_from_the_graph(tmp_path: Path) -> None:
    """A graph with a ``sentence_embedding`` output and no token_type_ids input."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    table = np.random.default_rng(0).normal(size=(30522, 6)).astype(np.float32)
    table[0] = 0.0
    nodes = [
        helper.make_node("Gather", ["table", "input_ids"], ["tok"]),
        helper.make_node("Cast", ["attention_mask"], ["maskf"], to=TensorProto.FLOAT),
        helper.make_node("Unsqueeze", ["maskf", "axis2"], ["mask3"]),
        helper.make_node("Mul", ["tok", "mask3"], ["masked"]),
        helper.make_node("ReduceSum", ["masked", "axis1"], ["sentence_embedding"], keepdims=0),
    ]
    graph = helper.make_graph(
        nodes,
        "pooled",
        [helper.make_tensor_value_info(n, TensorProto.INT64, ["b", "s"]) for n in ("input_ids", "attention_mask")],
        [helper.make_tensor_value_info("sentence_embedding", TensorProto.FLOAT, ["b", 6])],
        [
            numpy_helper.from_array(table, "table"),
            numpy_helper.from_array(np.array([2], np.int64), "axis2"),
            numpy_helper.from_array(np.array([1], np.int64), "axis1"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    (tmp_path / "onnx").mkdir()
    onnx.save_model(model, str(tmp_path / "onnx" / "model.onnx"))
    shutil.copyfile(MODEL_DIR / "tokenizer.json", tmp_path / "tokenizer.json")

    texts = ["one", "two words", "three words here", ""]
    with OnnxEmbedding(str(tmp_path), batch_size=3, workers=2) as p:
        assert p.dimension == 6
        got = embed(p, texts)
    tok = tokenizer()
    want = np.asarray([table[tok.encode(t).ids].sum(0) for t in texts])
    want /= np.linalg.norm(want, axis=1, keepdims=True)
    assert np.allclose(got, want, atol=1e-5)


def onnx_pools(workers: int | None = None, *, threads: int | None = None, cpus: int) -> tuple[int, int]:
    pools = plan(workers, threads=threads, cpus=cpus)
    return pools.inference_workers, pools.intra_op_threads


def test_default_inference_parallelism_never_oversubscribes() -> None:
    for cpus in (1, 2, 3, 4, 8, 16, 64):
        workers, threads = onnx_pools(cpus=cpus)
        assert workers >= 1 and threads >= 1 and workers * threads <= cpus
    assert onnx_pools(cpus=2) == (2, 1)
    assert onnx_pools(cpus=16) == (4, 4)
    assert onnx_pools(1, cpus=8) == (1, 8)
    assert onnx_pools(threads=4, cpus=8) == (2, 4)


def test_provider_workers_are_the_planned_pools() -> None:
    want = plan()
    with get_provider("onnx", model=str(MODEL_DIR), quantized=False) as p:  # nothing given: plan() on this machine
        assert (p.workers, p.threads) == (want.inference_workers, want.intra_op_threads)
    with get_provider("onnx", model=str(MODEL_DIR)) as p:  # int8, one text per call: single-threaded workers
        assert (p.workers, p.threads) == (want.inference_workers * want.intra_op_threads, 1)
    with OnnxEmbedding(str(MODEL_DIR), workers=3, threads=1) as p:
        assert (p.workers, p.threads) == (3, 1)
    with pytest.raises(ValueError, match="workers"):
        OnnxEmbedding(str(MODEL_DIR), workers=0)


def test_get_provider_takes_a_parallelism_plan() -> None:
    pools = plan(3, cpus=available_cpus() * 3)
    assert (pools.inference_workers, pools.intra_op_threads) == (3, available_cpus())
    with get_provider("onnx", model=str(MODEL_DIR), parallelism=pools, quantized=False) as p:
        assert isinstance(p, EmbeddingProvider)
        assert p.workers == 3 and p.threads == available_cpus()
        assert len(asyncio.run(p.embed(varied_texts(7)))) == 7
    with get_provider("onnx", model=str(MODEL_DIR), parallelism=pools) as p:  # int8: the same cores, one text a call
        assert p.workers == 3 * available_cpus() and p.threads == 1
        assert len(asyncio.run(p.embed(varied_texts(7)))) == 7
    with pytest.raises(ValueError, match="either parallelism or workers"):
        get_provider("onnx", model=str(MODEL_DIR), parallelism=pools, workers=2)
    with pytest.raises(ValueError, match="either parallelism or workers"):
        get_provider("onnx", model=str(MODEL_DIR), parallelism=pools, threads=2)


def test_errors_are_one_line_and_typed(tmp_path: Path) -> None:
    with pytest.raises(UnknownProviderError) as info:
        get_provider("sentence-transformers")
    assert isinstance(info.value, ValueError) and "\n" not in str(info.value)
    assert all(name in str(info.value) for name in ("onnx", "openai", "ollama"))
    with pytest.raises(ModelNotFoundError, match="does not exist"):
        get_provider("onnx", model=str(tmp_path / "nope"))
    with pytest.raises(ModelNotFoundError, match="not an ONNX model directory"):
        get_provider("onnx", model=str(tmp_path))
    with pytest.raises(ModelNotFoundError, match="memsearch model import") as info:
        get_provider("onnx", model="some-org/some-model", cache_dir=tmp_path, offline=True)
    assert "\n" not in str(info.value)
    with pytest.raises(ValueError, match="batch_size"):
        get_provider("onnx", model=str(MODEL_DIR), batch_size=-1)


def test_broken_model_files_are_one_line_errors(tmp_path: Path) -> None:
    (tmp_path / "onnx").mkdir()
    (tmp_path / "onnx" / "model.onnx").write_bytes(b"not an onnx protobuf")
    shutil.copyfile(MODEL_DIR / "tokenizer.json", tmp_path / "tokenizer.json")
    with pytest.raises(EmbeddingError, match="cannot load ONNX model") as info:
        OnnxEmbedding(str(tmp_path))
    assert "\n" not in str(info.value)
    (tmp_path / "tokenizer.json").write_text("{broken")
    with pytest.raises(EmbeddingError, match=r"cannot load .*tokenizer\.json") as info:
        OnnxEmbedding(str(tmp_path))
    assert "\n" not in str(info.value)
    with pytest.raises(ValueError, match="threads"):
        OnnxEmbedding(str(MODEL_DIR), threads=0)


def test_fp32_only_request_on_int8_only_dir(tmp_path: Path) -> None:
    (tmp_path / "onnx").mkdir()
    (tmp_path / "onnx" / "model_quantized.onnx").symlink_to(MODEL_DIR / "onnx" / "model_quantized.onnx")
    shutil.copyfile(MODEL_DIR / "tokenizer.json", tmp_path / "tokenizer.json")
    with pytest.raises(ModelNotFoundError, match="fp32"):
        OnnxEmbedding(str(tmp_path), quantized=False)


def test_bad_input_and_close() -> None:
    p = OnnxEmbedding(str(MODEL_DIR), workers=1)
    with pytest.raises(TypeError, match="list of str"):
        asyncio.run(p.embed("a string"))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="item 1 is bytes"):
        asyncio.run(p.embed(["ok", b"bytes"]))  # type: ignore[list-item]
    assert asyncio.run(p.embed([])) == []
    p.close()
    p.close()  # idempotent
    with pytest.raises(EmbeddingError, match="closed"):
        asyncio.run(p.embed(["after close"]))


def test_providers_take_the_runs_parallelism(model_dir: Path) -> None:
    """The plan is made once per run and handed down; workers/threads beside it are refused."""
    pools = plan(3, threads=1)
    onnx = get_provider("onnx", model=str(model_dir), parallelism=pools)
    try:
        assert onnx.workers == 3
    finally:
        onnx.close()
    remote = get_provider("openai", model="m", api_key="k", base_url="http://127.0.0.1:9/v1", parallelism=plan(5))
    assert remote.workers == 5
    with pytest.raises(ValueError, match="not both"):
        get_provider("onnx", model=str(model_dir), parallelism=pools, workers=2)
    with pytest.raises(ValueError, match="not both"):
        get_provider("openai", model="m", api_key="k", parallelism=pools, workers=2)
