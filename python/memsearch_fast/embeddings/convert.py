"""Convert a BERT-family checkpoint to ONNX without torch.

The graph is written op by op with ``onnx.helper`` from the safetensors
weights, so a default install can build its embedding model offline from a
checkpoint on disk, without pulling in PyTorch (~2 GB) just to export once.
A sentence-transformers checkpoint becomes an encoder (``last_hidden_state``);
a ``BertForSequenceClassification`` cross-encoder gets the same encoder plus
its pooler and classifier (``logits``), for ``search --reranker-model``.

This module is pure conversion (checkpoint directory in, hub-layout model
folder out); naming, caching and publishing a converted model is
``memsearch_fast.embeddings.models.import_model``.
"""

from __future__ import annotations

import json
import math
import shutil
import struct
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memsearch_fast.errors import ModelConversionError

if TYPE_CHECKING:
    import numpy as np

OPSET = 17  # first opset with LayerNormalization
IR_VERSION = 8  # loadable by onnxruntime >= 1.14
_SUPPORTED_MODULES = ("Transformer", "Pooling", "Normalize")
_COPIED_FILES = (
    "tokenizer.json",
    "config.json",
    "special_tokens_map.json",
    "tokenizer_config.json",
    "modules.json",
    "config_sentence_transformers.json",
    "LICENSE",
    "NOTICE",
)


def convert_checkpoint(src: Path, out: Path, *, quantize: bool = True) -> None:
    """Write the hub-layout ONNX model for checkpoint directory *src* into *out*."""
    config = _read_json(src / "config.json", required=True)
    _check_supported(src, config)
    tensors = read_safetensors_dir(src)
    classifier = is_sequence_classifier(config, tensors)
    weights = _bert_weights(tensors, config, classifier=classifier)
    (out / "onnx").mkdir(parents=True, exist_ok=True)
    _write_tokenizer(src, out)
    for fname in _COPIED_FILES:
        if (src / fname).is_file() and not (out / fname).exists():
            shutil.copyfile(src / fname, out / fname)
    if not classifier:  # pooling settings describe embedding models only
        _write_sentence_configs(src, out, config)

    import onnx

    fp32 = out / "onnx" / "model.onnx"
    onnx.save_model(build_bert_graph(weights, config), str(fp32))
    if quantize:
        quantize_int8(fp32, out / "onnx" / "model_quantized.onnx")


def quantize_int8(fp32: Path, dest: Path) -> None:
    """Dynamic int8 quantisation of the weight MatMuls (per channel), the usual CPU recipe."""
    import logging

    from onnxruntime.quantization import QuantType, quantize_dynamic

    class _DropPreprocessHint(logging.Filter):
        # quantize_dynamic logs a generic "consider pre-processing" hint on the root logger.
        def filter(self, record: logging.LogRecord) -> bool:
            return "pre-processing" not in record.getMessage()

    hint_filter = _DropPreprocessHint()
    logging.getLogger().addFilter(hint_filter)
    try:
        quantize_dynamic(
            str(fp32),
            str(dest),
            per_channel=True,
            # 7-bit weights: CPUs without VNNI (AVX2 only) multiply u8 x s8 pairs into
            # saturating int16 sums, which full-range weights overflow.
            reduce_range=True,
            op_types_to_quantize=["MatMul"],
            weight_type=QuantType.QInt8,
        )
    finally:
        logging.getLogger().removeFilter(hint_filter)


# --------------------------------------------------------------------------- weights


_ST_DTYPES = {
    "F64": "<f8",
    "F32": "<f4",
    "F16": "<f2",
    "BF16": "<u2",
    "I64": "<i8",
    "I32": "<i4",
    "I16": "<i2",
    "I8": "i1",
    "U8": "u1",
    "BOOL": "?",
}


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    """Read a safetensors file into numpy arrays (8-byte header length, JSON header, raw data)."""
    import numpy as np

    size = path.stat().st_size
    with open(path, "rb") as fh:
        head = fh.read(8)
        if len(head) != 8:
            raise ModelConversionError(f"{path.name} is not a safetensors file (too short)")
        (header_len,) = struct.unpack("<Q", head)
        if header_len > min(size - 8, 100_000_000):
            raise ModelConversionError(f"{path.name} is not a safetensors file (bad header length)")
        try:
            header = json.loads(fh.read(header_len))
        except ValueError:
            raise ModelConversionError(f"{path.name} is not a safetensors file (bad header)") from None
    data = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + header_len)
    tensors: dict[str, np.ndarray] = {}
    for tname, info in header.items():
        if tname == "__metadata__":
            continue
        dtype = _ST_DTYPES.get(info.get("dtype", ""))
        start, end = info.get("data_offsets", (0, -1))
        if dtype is None or not 0 <= start <= end <= data.shape[0]:
            raise ModelConversionError(f"{path.name}: unsupported or corrupt tensor {tname!r}")
        arr = np.frombuffer(data[start:end], dtype=dtype).reshape(info["shape"])
        if info["dtype"] == "BF16":
            arr = (arr.astype(np.uint32) << 16).view(np.float32)
        tensors[tname] = arr
    return tensors


def read_safetensors_dir(src: Path) -> dict[str, np.ndarray]:
    files = sorted(src.glob("*.safetensors"))
    if not files:
        hint = (
            " (only pytorch_model.bin found; save the checkpoint as safetensors)"
            if (src / "pytorch_model.bin").exists()
            else ""
        )
        raise ModelConversionError(f"no *.safetensors weights in {src}{hint}")
    tensors: dict[str, np.ndarray] = {}
    for f in files:
        tensors.update(read_safetensors(f))
    return tensors


def is_sequence_classifier(config: dict[str, Any], tensors: dict[str, np.ndarray]) -> bool:
    """A cross-encoder checkpoint: declared ``*ForSequenceClassification`` or carrying a classifier head."""
    archs = config.get("architectures")
    declared = isinstance(archs, list) and any(str(a).endswith("ForSequenceClassification") for a in archs)
    return declared or "classifier.weight" in tensors


def _bert_weights(
    tensors: dict[str, np.ndarray], config: dict[str, Any], *, classifier: bool = False
) -> dict[str, np.ndarray]:
    """Strip the checkpoint's key prefix (``bert.``, ``0.auto_model.``...) and check completeness.

    With *classifier*, the pooler (under the prefix) and the head (``classifier.*``,
    beside it) are required too.
    """
    import numpy as np

    anchor = "embeddings.word_embeddings.weight"
    prefix = next((k[: -len(anchor)] for k in tensors if k.endswith(anchor)), None)
    if prefix is None:
        raise ModelConversionError("checkpoint has no embeddings.word_embeddings.weight: not a BERT model")
    weights = {k[len(prefix) :]: v for k, v in tensors.items() if k.startswith(prefix)}
    head = ("pooler.dense.weight", "pooler.dense.bias", "classifier.weight", "classifier.bias")
    if classifier:
        weights.update({k: tensors[k] for k in head[2:] if k in tensors})
    required = [
        anchor,
        "embeddings.position_embeddings.weight",
        "embeddings.LayerNorm.weight",
        "embeddings.LayerNorm.bias",
    ]
    for i in range(int(config["num_hidden_layers"])):
        p = f"encoder.layer.{i}."
        for part in (
            "attention.self.query",
            "attention.self.key",
            "attention.self.value",
            "attention.output.dense",
            "intermediate.dense",
            "output.dense",
        ):
            required += [f"{p}{part}.weight", f"{p}{part}.bias"]
        for ln in ("attention.output.LayerNorm", "output.LayerNorm"):
            required += [f"{p}{ln}.weight", f"{p}{ln}.bias"]
    if classifier:
        required += head
    missing = [k for k in required if k not in weights]
    if missing:
        raise ModelConversionError(f"checkpoint is missing {len(missing)} BERT weights, e.g. {missing[0]}")
    if classifier and weights["classifier.weight"].ndim != 2:
        raise ModelConversionError("classifier.weight must be a [num_labels, hidden_size] matrix")
    return {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in weights.items() if v.dtype.kind == "f"}


def _check_supported(src: Path, config: dict[str, Any]) -> None:
    model_type = config.get("model_type", "")
    if model_type != "bert":
        raise ModelConversionError(f"unsupported model_type {model_type!r}: only BERT-family checkpoints convert")
    if config.get("position_embedding_type", "absolute") != "absolute":
        raise ModelConversionError("only absolute position embeddings are supported")
    if config.get("hidden_act", "gelu") not in ("gelu", "gelu_new", "gelu_pytorch_tanh", "relu"):
        raise ModelConversionError(f"unsupported activation {config.get('hidden_act')!r}")
    for key in ("hidden_size", "num_attention_heads", "num_hidden_layers"):
        if not isinstance(config.get(key), int):
            raise ModelConversionError(f"config.json lacks integer {key!r}")
    modules = _read_json(src / "modules.json", required=False)
    for module in modules if isinstance(modules, list) else []:
        kind = str(module.get("type", "")).rsplit(".", 1)[-1]
        if kind not in _SUPPORTED_MODULES:
            raise ModelConversionError(f"sentence-transformers module {kind!r} is not supported by the converter")


# --------------------------------------------------------------------------- side files


def _write_tokenizer(src: Path, out: Path) -> None:
    if (src / "tokenizer.json").is_file():
        shutil.copyfile(src / "tokenizer.json", out / "tokenizer.json")
        return
    if not (src / "vocab.txt").is_file():
        raise ModelConversionError(f"no tokenizer.json or vocab.txt in {src}")
    from tokenizers import BertWordPieceTokenizer

    tok_cfg = _read_json(src / "tokenizer_config.json", required=False) or {}
    tokenizer = BertWordPieceTokenizer(str(src / "vocab.txt"), lowercase=bool(tok_cfg.get("do_lower_case", True)))
    tokenizer.save(str(out / "tokenizer.json"))


def _write_sentence_configs(src: Path, out: Path, config: dict[str, Any]) -> None:
    max_pos = int(config.get("max_position_embeddings", 512))
    st_cfg = _read_json(src / "sentence_bert_config.json", required=False) or {}
    st_cfg["max_seq_length"] = min(int(st_cfg.get("max_seq_length") or max_pos), max_pos)
    st_cfg.setdefault("do_lower_case", False)
    (out / "sentence_bert_config.json").write_text(json.dumps(st_cfg, indent=2) + "\n")
    pooling = _read_json(src / "1_Pooling" / "config.json", required=False) or {
        "word_embedding_dimension": config["hidden_size"],
        "pooling_mode_cls_token": False,
        "pooling_mode_mean_tokens": True,
        "pooling_mode_max_tokens": False,
        "pooling_mode_mean_sqrt_len_tokens": False,
    }
    (out / "1_Pooling").mkdir(exist_ok=True)
    (out / "1_Pooling" / "config.json").write_text(json.dumps(pooling, indent=2) + "\n")


def _read_json(path: Path, *, required: bool) -> Any:
    if not path.is_file():
        if required:
            raise ModelConversionError(f"{path.name} not found in {path.parent}")
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except ValueError:
        raise ModelConversionError(f"{path} is not valid JSON") from None


def checkpoint_root(extracted: Path) -> Path:
    """The checkpoint folder inside an extracted archive: its top level or the folder holding the weights."""
    if (extracted / "config.json").is_file():
        return extracted
    found = sorted(p.parent for p in extracted.rglob("config.json") if any(p.parent.glob("*.safetensors")))
    if not found:
        raise ModelConversionError("archive holds no checkpoint (config.json next to *.safetensors)")
    return found[0]


# --------------------------------------------------------------------------- graph


class _GraphBuilder:
    """Tiny helper that names nodes and initializers as it goes."""

    def __init__(self) -> None:
        self.nodes: list[Any] = []
        self.inits: list[Any] = []
        self._n = 0

    def const(self, name: str, value: np.ndarray) -> str:
        from onnx import numpy_helper

        self.inits.append(numpy_helper.from_array(value, name))
        return name

    def op(self, op_type: str, inputs: list[str], name: str | None = None, **attrs: Any) -> str:
        from onnx import helper

        self._n += 1
        out = name or f"{op_type.lower()}_{self._n}"
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=f"n{self._n}_{op_type}", **attrs))
        return out


def build_bert_graph(w: dict[str, np.ndarray], config: dict[str, Any]) -> Any:
    """Build the BERT encoder graph: inputs ids/mask/type ids, output ``last_hidden_state``.

    When *w* holds a classifier head (``classifier.weight``), the output is
    ``logits`` [batch, num_labels] instead: the pooler (tanh dense on the
    first token) and the classifier, as ``BertForSequenceClassification`` at
    inference.
    """
    import numpy as np
    from onnx import TensorProto, helper

    hidden = int(config["hidden_size"])
    heads = int(config["num_attention_heads"])
    if hidden % heads:
        raise ModelConversionError("hidden_size is not divisible by num_attention_heads")
    head_dim = hidden // heads
    eps = float(config.get("layer_norm_eps", 1e-12))
    act = config.get("hidden_act", "gelu")
    g = _GraphBuilder()
    f32 = np.float32

    def scalar(name: str, value: float) -> str:
        return g.const(name, np.array(value, dtype=f32))

    def linear(x: str, prefix: str) -> str:
        weight = g.const(f"{prefix}.weight_t", np.ascontiguousarray(w[f"{prefix}.weight"].T))
        bias = g.const(f"{prefix}.bias", w[f"{prefix}.bias"])
        return g.op("Add", [g.op("MatMul", [x, weight]), bias])

    def layer_norm(x: str, prefix: str) -> str:
        scale = g.const(f"{prefix}.weight", w[f"{prefix}.weight"])
        bias = g.const(f"{prefix}.bias", w[f"{prefix}.bias"])
        return g.op("LayerNormalization", [x, scale, bias], axis=-1, epsilon=eps)

    # Embeddings: word + position + token type, then LayerNorm.
    word = g.op(
        "Gather", [g.const("embeddings.word_embeddings.weight", w["embeddings.word_embeddings.weight"]), "input_ids"]
    )
    shape = g.op("Shape", ["input_ids"])
    seq_len = g.op("Gather", [shape, g.const("one_i64", np.array(1, dtype=np.int64))], axis=0)
    positions = g.op("Range", [g.const("zero_i64", np.array(0, dtype=np.int64)), seq_len, "one_i64"])
    pos = g.op(
        "Gather",
        [g.const("embeddings.position_embeddings.weight", w["embeddings.position_embeddings.weight"]), positions],
    )
    emb = g.op("Add", [word, pos])
    if "embeddings.token_type_embeddings.weight" in w:
        tt = g.op(
            "Gather",
            [
                g.const("embeddings.token_type_embeddings.weight", w["embeddings.token_type_embeddings.weight"]),
                "token_type_ids",
            ],
        )
        emb = g.op("Add", [emb, tt])
    x = layer_norm(emb, "embeddings.LayerNorm")

    # Additive attention mask [B, 1, 1, S]: 0 for tokens, -10000 for padding. Node order
    # follows the usual PyTorch export so onnxruntime's transformer optimizer recognises it.
    mask = g.op("Unsqueeze", ["attention_mask", g.const("axis_1", np.array([1], dtype=np.int64))])
    mask = g.op("Unsqueeze", [mask, g.const("axis_2", np.array([2], dtype=np.int64))])
    mask_f = g.op("Cast", [mask], to=TensorProto.FLOAT)
    inv = g.op("Sub", [scalar("one_f", 1.0), mask_f])
    ext_mask = g.op("Mul", [inv, scalar("mask_neg", -10000.0)])
    split_shape = g.const("split_heads_shape", np.array([0, 0, heads, head_dim], dtype=np.int64))
    merge_shape = g.const("merge_heads_shape", np.array([0, 0, hidden], dtype=np.int64))
    sqrt_hd = scalar("sqrt_head_dim", math.sqrt(head_dim))
    half, one, sqrt2 = scalar("half", 0.5), "one_f", scalar("sqrt2", math.sqrt(2.0))

    for i in range(int(config["num_hidden_layers"])):
        p = f"encoder.layer.{i}."
        q = g.op(
            "Transpose", [g.op("Reshape", [linear(x, p + "attention.self.query"), split_shape])], perm=[0, 2, 1, 3]
        )
        k = g.op("Transpose", [g.op("Reshape", [linear(x, p + "attention.self.key"), split_shape])], perm=[0, 2, 3, 1])
        v = g.op(
            "Transpose", [g.op("Reshape", [linear(x, p + "attention.self.value"), split_shape])], perm=[0, 2, 1, 3]
        )
        scores = g.op("Add", [g.op("Div", [g.op("MatMul", [q, k]), sqrt_hd]), ext_mask])
        probs = g.op("Softmax", [scores], axis=-1)
        ctx = g.op("Transpose", [g.op("MatMul", [probs, v])], perm=[0, 2, 1, 3])
        ctx = g.op("Reshape", [ctx, merge_shape])
        attn = linear(ctx, p + "attention.output.dense")
        x = layer_norm(g.op("Add", [attn, x]), p + "attention.output.LayerNorm")
        inter = linear(x, p + "intermediate.dense")
        if act == "relu":
            inter = g.op("Relu", [inter])
        elif act == "gelu":  # exact GELU: 0.5 * x * (1 + erf(x / sqrt(2)))
            erf = g.op("Erf", [g.op("Div", [inter, sqrt2])])
            inter = g.op("Mul", [g.op("Mul", [inter, g.op("Add", [erf, one])]), half])
        else:  # tanh approximation used by gelu_new / gelu_pytorch_tanh
            cube = g.op("Mul", [g.op("Mul", [inter, inter]), inter])
            inner = g.op("Add", [inter, g.op("Mul", [cube, scalar(f"gelu_c_{i}", 0.044715)])])
            tanh = g.op("Tanh", [g.op("Mul", [inner, scalar(f"gelu_s_{i}", math.sqrt(2.0 / math.pi))])])
            inter = g.op("Mul", [g.op("Mul", [inter, half]), g.op("Add", [tanh, one])])
        out = linear(inter, p + "output.dense")
        x = layer_norm(g.op("Add", [out, x]), p + "output.LayerNorm")

    dyn = ["batch_size", "sequence_length"]
    if "classifier.weight" in w:
        first = g.op("Gather", [x, "zero_i64"], axis=1)  # [B, hidden]: the [CLS] token
        pooled = g.op("Tanh", [linear(first, "pooler.dense")])
        labels = int(w["classifier.weight"].shape[0])
        g.nodes.append(helper.make_node("Identity", [linear(pooled, "classifier")], ["logits"], name="output"))
        output = helper.make_tensor_value_info("logits", TensorProto.FLOAT, [dyn[0], labels])
        graph_name = "bert_cross_encoder"
    else:
        g.nodes.append(helper.make_node("Identity", [x], ["last_hidden_state"], name="output"))
        output = helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, [*dyn, hidden])
        graph_name = "bert_encoder"
    inputs = [
        helper.make_tensor_value_info(n, TensorProto.INT64, dyn)
        for n in ("input_ids", "attention_mask", "token_type_ids")
    ]
    graph = helper.make_graph(g.nodes, graph_name, inputs, [output], g.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="memsearch-fast")
    model.ir_version = IR_VERSION
    return model
