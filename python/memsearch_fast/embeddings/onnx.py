"""Local ONNX embedding provider (the default): no API key, no torch, no network.

Throughput comes from three things the naive loop lacks: texts are sorted by
token length before batching so padding is small; batches run on a bounded pool
of inference workers whose onnxruntime threads add up to the available cores
(onnxruntime releases the GIL, so threads run truly in parallel); tokenisation
and the conversion to Python floats run off the event loop, overlapping with
inference of other calls.

An int8 model runs one text per inference call unless a batch size is given:
its activations are quantized with one scale per call (onnxruntime's
``DynamicQuantizeLinear``), so in a batch a text's vector depended on its
batch mates (cosine 0.98-0.99 to itself alone). Alone, a text gets the same
vector in an index run, in a repair and as a query. Its cores then go to
single-threaded workers (``workers x threads`` of them, sharing one session):
one row per call keeps a wide worker's threads half idle. On 2 cores this
was faster than batches of 32 (docs/reliability.md).
"""

from __future__ import annotations

import asyncio
import json
import os
import queue
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from memsearch_fast.config.schema import DEFAULT_MODELS
from memsearch_fast.embeddings._remote import check_texts
from memsearch_fast.embeddings.models import canonical_name, onnx_file, resolve_model
from memsearch_fast.errors import EmbeddingError, ModelNotFoundError, one_line
from memsearch_fast.parallelism import Parallelism, available_cpus, plan

if TYPE_CHECKING:
    import numpy as np

DEFAULT_BATCH_SIZE = 32
#: The default for an int8 model: one text per call, so its vector does not
#: depend on the texts embedded with it (see the module docstring).
INT8_BATCH_SIZE = 1
#: Rows x padded length^2 of one inference batch. The attention buffers grow
#: with it, and onnxruntime's arena keeps each worker's peak: 4 texts of 256
#: tokens (or 16 of 128) per batch cut the embedder's peak RSS on the 1 MB
#: benchmark corpus from 990 to 345 MB at the same speed (23.4 s against
#: 22.2-24.7 s unbounded); shorter texts still fill a whole batch.
ATTENTION_BUDGET = 4 * 256 * 256
WINDOW = 4096  # texts tokenised and sorted together; bounds memory of one embed() call
_POOLED_OUTPUTS = ("sentence_embedding", "dense_vecs")
_TOKEN_OUTPUTS = ("last_hidden_state", "token_embeddings")
_POOLING_MODES = ("mean", "cls", "max")


def session_options(threads: int, *, spinning: bool) -> Any:
    """The onnxruntime options of every local model (embedding and reranker):
    *threads* intra-op threads, sequential execution, all graph optimisations,
    quiet logs; *spinning* False keeps idle threads off the cores."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3
    if not spinning:
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return options


class OnnxEmbedding:
    """Sentence embeddings from an ONNX model in hub layout (see ``models.resolve_model``).

    ``workers`` inference workers run at once, each with ``threads`` onnxruntime
    intra-op threads; unset, both come from ``memsearch_fast.parallelism.plan``.
    """

    def __init__(
        self,
        model: str | os.PathLike[str] | None = None,
        *,
        batch_size: int = 0,
        workers: int | None = None,
        threads: int | None = None,
        parallelism: Parallelism | None = None,
        quantized: bool = True,
        max_seq_length: int | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
        offline: bool | None = None,
        model_name: str | None = None,
    ) -> None:
        import numpy  # noqa: F401  (fail early with a clear error if missing)
        import onnxruntime as ort
        from tokenizers import Tokenizer

        cpus = available_cpus()
        if parallelism is not None and (workers is not None or threads is not None):
            raise ValueError("pass either parallelism or workers/threads, not both")
        pools = parallelism or plan(workers, threads=threads, cpus=cpus)  # validates workers and threads
        self._workers, self._threads = pools.inference_workers, pools.intra_op_threads

        self._model_dir = resolve_model(model, cache_dir=cache_dir, offline=offline)
        if model_name:  # *model* was resolved by another process under this name (search_service)
            self._model_name = model_name
        elif model is None:
            self._model_name = DEFAULT_MODELS["onnx"]
        elif Path(model).expanduser().exists():
            self._model_name = os.fspath(model)
        else:  # one name for both spellings of the default model
            self._model_name = canonical_name(os.fspath(model))
        path = onnx_file(self._model_dir, quantized=quantized)
        if path is None:
            raise ModelNotFoundError(f"{self._model_dir} has no fp32 model (onnx/model.onnx); use quantized=True")
        self._onnx_path = path
        int8 = path != onnx_file(self._model_dir, quantized=False)
        self._batch_size = batch_size if batch_size > 0 else INT8_BATCH_SIZE if int8 else DEFAULT_BATCH_SIZE
        if self._batch_size == 1:
            self._workers, self._threads = self._workers * self._threads, 1
        self._max_len = self._max_seq_length(max_seq_length)
        try:
            self._tokenizer = Tokenizer.from_file(str(self._model_dir / "tokenizer.json"))
        except Exception as exc:  # noqa: BLE001 - tokenizers raises a bare Exception on bad JSON
            detail = one_line(exc) or type(exc).__name__
            raise EmbeddingError(f"cannot load {self._model_dir / 'tokenizer.json'}: {detail}") from None
        self._tokenizer.no_padding()
        self._tokenizer.enable_truncation(max_length=self._max_len)

        # Spinning threads would steal cores from the other workers.
        options = session_options(self._threads, spinning=self._workers * self._threads < cpus)
        try:
            first = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own exception types
            detail = one_line(exc) or type(exc).__name__
            raise EmbeddingError(f"cannot load ONNX model {path}: {detail}") from None
        # A session runs concurrently from several threads; with one intra-op thread
        # per worker the work happens on the calling thread, so one session (one copy
        # of the weights) serves all workers. Wider workers get their own sessions.
        sessions = [first] + [
            first
            if self._threads == 1
            else ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
            for _ in range(self._workers - 1)
        ]
        self._sessions: queue.SimpleQueue[Any] = queue.SimpleQueue()
        for session in sessions:
            self._sessions.put(session)

        self._input_names = {i.name for i in first.get_inputs()}
        if "input_ids" not in self._input_names:
            raise EmbeddingError(f"ONNX model {path} has no input_ids input")
        outputs = [o.name for o in first.get_outputs()]
        if outputs == ["logits"]:
            raise EmbeddingError(
                f"{path} is a cross-encoder (it outputs relevance logits, not embeddings); "
                "use it with search --reranker-model"
            )
        pooled = next((n for n in _POOLED_OUTPUTS if n in outputs), None)
        token = next((n for n in _TOKEN_OUTPUTS if n in outputs), outputs[0])
        self._output = pooled or token
        self._pooled = pooled is not None
        self._pooling = "mean" if self._pooled else self._pooling_mode()

        self._pool = ThreadPoolExecutor(self._workers, thread_name_prefix="memsearch-onnx")
        # Tokenisation and result assembly: one thread, so they pipeline with inference.
        self._prep = ThreadPoolExecutor(1, thread_name_prefix="memsearch-onnx-prep")
        self._closed = False
        self._lock = threading.Lock()
        self._counter: Any = None  # the tokenizer copy of count_tokens, made on first use
        self._dimension = self._probe_dimension(first, outputs)

    # ------------------------------------------------------------------ properties

    @property
    def model_name(self) -> str:
        return self._model_name

    @property
    def dimension(self) -> int:
        return self._dimension

    @property
    def batch_size(self) -> int:
        return self._batch_size

    @property
    def workers(self) -> int:
        return self._workers

    @property
    def threads(self) -> int:
        return self._threads

    @property
    def model_path(self) -> Path:
        """The ONNX file in use (int8 ``model_quantized.onnx`` or fp32 ``model.onnx``)."""
        return self._onnx_path

    @property
    def max_seq_length(self) -> int:
        return self._max_len

    @property
    def tokenizer_name(self) -> str:
        """Name of the token count that :meth:`count_tokens` gives."""
        name = os.path.basename(str(self._model_name).rstrip(os.sep)) or "onnx"
        return f"{name} tokenizer.json"

    def __repr__(self) -> str:
        return (
            f"OnnxEmbedding(model={self._model_name!r}, file={self._onnx_path.name!r}, "
            f"workers={self._workers}, threads={self._threads}, batch_size={self._batch_size})"
        )

    # ------------------------------------------------------------------ public API

    async def embed(self, texts: list[str]) -> list[list[float]]:
        """Embed *texts*; returns L2-normalised vectors (lists of floats) in input order.

        Texts are processed in windows of ``WINDOW`` so memory stays bounded for
        huge calls; the next window is tokenised while the current one runs.
        """
        check_texts(texts)
        if not texts:
            return []
        self._check_open()
        import numpy as np

        loop = asyncio.get_running_loop()
        out = np.empty((len(texts), self._dimension), dtype=np.float32)
        starts = range(0, len(texts), WINDOW)
        planned = loop.run_in_executor(self._prep, self._plan, texts[:WINDOW], 0)
        for k in range(len(starts)):
            batches = await planned
            if k + 1 < len(starts):
                nxt = starts[k + 1]
                planned = loop.run_in_executor(self._prep, self._plan, texts[nxt : nxt + WINDOW], nxt)
            results = await asyncio.gather(*(loop.run_in_executor(self._pool, self._infer, b) for b in batches))
            for batch, vecs in zip(batches, results, strict=True):
                out[batch.rows] = vecs
        # ~10 ms per 1,000 x 384 floats: done off the loop.
        vectors: list[list[float]] = await loop.run_in_executor(self._prep, out.tolist)
        return vectors

    async def embed_query(self, text: str) -> list[float]:
        return (await self.embed([text]))[0]

    def count_tokens(self, text: str) -> int:
        """Tokens of *text* under the model's ``tokenizer.json``, in full (not cut
        at ``max_seq_length``) and without special tokens."""
        with self._lock:
            counter = self._counter
            if counter is None:
                # A copy without truncation and padding: the embedding settings stay untouched.
                counter = type(self._tokenizer).from_str(self._tokenizer.to_str())
                counter.no_truncation()
                counter.no_padding()
                self._counter = counter
        try:
            return len(counter.encode(text, add_special_tokens=False).ids)
        except Exception:  # noqa: BLE001 - e.g. lone surrogates that cannot be encoded as UTF-8
            return len(counter.encode(_clean(text), add_special_tokens=False).ids)

    def embed_sync(self, texts: list[str]) -> np.ndarray:
        """Blocking variant returning a float32 array (for tools and benchmarks)."""
        check_texts(texts)
        self._check_open()
        import numpy as np

        out = np.empty((len(texts), self._dimension), dtype=np.float32)
        for start in range(0, len(texts), WINDOW):
            batches = self._plan(texts[start : start + WINDOW], start)
            for batch, vecs in zip(batches, self._pool.map(self._infer, batches), strict=True):
                out[batch.rows] = vecs
        return out

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._prep.shutdown(wait=True, cancel_futures=True)
        while not self._sessions.empty():
            self._sessions.get_nowait()

    def __enter__(self) -> OnnxEmbedding:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> OnnxEmbedding:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ internals

    def _check_open(self) -> None:
        if self._closed:
            raise EmbeddingError("the onnx embedding provider is closed")

    def _plan(self, texts: list[str], offset: int) -> list[_Batch]:
        """Tokenise, sort by token length (longest first) and pad each batch to its longest text."""
        import numpy as np

        try:
            encodings = self._tokenizer.encode_batch(texts)
        except Exception:  # noqa: BLE001 - e.g. lone surrogates that cannot be encoded as UTF-8
            encodings = self._tokenizer.encode_batch([_clean(t) for t in texts])
        lengths = np.fromiter((len(e.ids) for e in encodings), dtype=np.int64, count=len(encodings))
        order = np.argsort(-lengths, kind="stable")
        batches = []
        i = 0
        while i < len(order):
            # Attention memory grows with rows x length^2: long texts go in smaller batches.
            longest = int(lengths[order[i]])
            fit = max(1, ATTENTION_BUDGET // max(1, longest * longest))
            rows = order[i : i + min(self._batch_size, fit)]
            i += len(rows)
            ids = np.zeros((len(rows), longest), dtype=np.int64)
            mask = np.zeros_like(ids)
            for r, j in enumerate(rows):
                n = int(lengths[j])
                ids[r, :n] = encodings[j].ids
                mask[r, :n] = 1
            batches.append(_Batch(rows + offset, ids, mask))
        return batches

    def _infer(self, batch: _Batch) -> np.ndarray:
        """Run one padded batch on a free session; returns normalised [B, dim] float32."""
        import numpy as np

        feed = {"input_ids": batch.ids}
        if "attention_mask" in self._input_names:
            feed["attention_mask"] = batch.mask
        if "token_type_ids" in self._input_names:
            feed["token_type_ids"] = np.zeros_like(batch.ids)
        session = self._sessions.get()
        try:
            (out,) = session.run([self._output], feed)
        finally:
            self._sessions.put(session)
        vecs = out if self._pooled else _pool(out, batch.mask, self._pooling)
        vecs = np.asarray(vecs, dtype=np.float32)
        norms = np.linalg.norm(vecs, axis=1, keepdims=True)
        normalized: np.ndarray = vecs / np.maximum(norms, 1e-12)
        return normalized

    def _max_seq_length(self, override: int | None) -> int:
        limit = 512
        config = _load_json(self._model_dir / "config.json")
        if isinstance(config.get("max_position_embeddings"), int):
            limit = config["max_position_embeddings"]
        st = _load_json(self._model_dir / "sentence_bert_config.json")
        wanted = override or st.get("max_seq_length") or limit
        if not isinstance(wanted, int) or wanted < 2:
            raise ValueError(f"max_seq_length must be an integer >= 2, got {wanted!r}")
        return min(wanted, limit)

    def _pooling_mode(self) -> str:
        cfg = _load_json(self._model_dir / "1_Pooling" / "config.json")
        if not cfg:
            return "mean"
        for mode in _POOLING_MODES:
            key = "pooling_mode_cls_token" if mode == "cls" else f"pooling_mode_{mode}_tokens"
            if cfg.get(key):
                return mode
        enabled = [k for k, v in cfg.items() if k.startswith("pooling_mode") and v]
        raise EmbeddingError(f"unsupported pooling {enabled} in {self._model_dir}; supported: mean, cls, max")

    def _probe_dimension(self, session: Any, outputs: list[str]) -> int:
        shape = session.get_outputs()[outputs.index(self._output)].shape
        if shape and isinstance(shape[-1], int):
            return shape[-1]
        probe = self._infer(self._plan(["dimension probe"], 0)[0])
        return int(probe.shape[1])


class _Batch(NamedTuple):
    rows: np.ndarray  # positions of these rows in the caller's list
    ids: np.ndarray  # [B, longest] int64, zero-padded
    mask: np.ndarray  # [B, longest] int64 attention mask


def _pool(hidden: np.ndarray, mask: np.ndarray, mode: str) -> np.ndarray:
    import numpy as np

    pooled: np.ndarray
    if mode == "cls":
        pooled = hidden[:, 0]
    elif mode == "max":
        pooled = np.where(mask[:, :, None] > 0, hidden, -np.inf).max(axis=1)
    else:
        m = mask.astype(hidden.dtype)
        pooled = np.einsum("bsh,bs->bh", hidden, m) / np.maximum(m.sum(axis=1, keepdims=True), 1e-9)
    return pooled


def _clean(text: str) -> str:
    return text.encode("utf-8", "replace").decode("utf-8")


def _load_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
