"""Cross-encoder reranking of the fused hits (``search --reranker-model``, ``reranker.model``).

The hybrid search ranks chunks by two separate views of the query (its
embedding and its words). A cross-encoder reads the query and a chunk
together, so it judges relevance better, at the price of one transformer
pass per candidate: :meth:`memsearch_fast.api.MemSearch.search` fetches
:func:`candidate_count` fused hits, scores them here and keeps the best
``top_k``.

As in memsearch 0.4.23, a reranked hit's ``score`` is the reranker's relevance
probability (the sigmoid of a one-logit head, the positive class of a
two-logit head); ``rerank_score`` is the log-odds it is sorted by, which does
not saturate at 1.0 the way the probability does.

Models are found where embedding models are (``models.resolve_model``): a
directory in hub layout, a name imported with ``memsearch model import`` or a
hub id; the int8 file is preferred, as for embeddings. A session is loaded on
first use and kept for the process, one per model file and thread count.
Standard library only at import time.
"""

from __future__ import annotations

import json
import math
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memsearch_fast.errors import EmbeddingError, RerankerError, one_line

if TYPE_CHECKING:
    import numpy as np

#: Fused hits reranked for a search of ``top_k``: three times ``top_k`` as
#: memsearch 0.4.23 fetches, but at least 20 (for the default ``-k 5`` a list
#: 15 deep leaves the reranker little to promote) and at most 50 (latency
#: grows linearly with the candidates), and never fewer than ``top_k``.
CANDIDATE_FACTOR = 3
MIN_CANDIDATES = 20
MAX_CANDIDATES = 50
#: Longest (query, chunk) pair in tokens; longer pairs lose tokens from the
#: longer side (the chunk). The model's own limit applies when it is lower.
MAX_RERANK_TOKENS = 512
#: Rows x padded length^2 of one onnxruntime run. Pairs are sorted by length
#: and cut into runs under it: short pairs share a run, a long one runs alone.
#: On 2 cores, 20 chunk-sized pairs (94-352 tokens) with a MiniLM-L6-sized
#: model took 2.2 s in one run padded to the longest, 0.8 s in runs under this
#: budget and about the same one pair per run (int8; benches/bench_rerank.py).
ATTENTION_BUDGET = 2 * 256 * 256
#: Output of a ``*ForSequenceClassification`` export.
_LOGITS = "logits"

_loaded: dict[tuple[str, int], CrossEncoder] = {}
_load_lock = threading.Lock()


def candidate_count(top_k: int) -> int:
    """How many fused hits to rerank for a search of *top_k* (see ``CANDIDATE_FACTOR``)."""
    return max(top_k, min(max(CANDIDATE_FACTOR * top_k, MIN_CANDIDATES), MAX_CANDIDATES))


def load(
    model: str,
    *,
    threads: int | None = None,
    quantized: bool = True,
    cache_dir: str | os.PathLike[str] | None = None,
    offline: bool | None = None,
) -> CrossEncoder:
    """The cross-encoder *model* (a directory, an imported name or a hub id), loaded
    once per process; *threads* intra-op threads (default: every inference core)."""
    if not model:
        raise RerankerError("no reranker model given (an empty reranker.model disables reranking)")
    from memsearch_fast.embeddings.models import onnx_file, resolve_model
    from memsearch_fast.parallelism import plan

    if threads is None:
        threads = plan().inference_threads
    try:
        model_dir = resolve_model(model, cache_dir=cache_dir, offline=offline)
    except (EmbeddingError, ValueError) as exc:
        raise RerankerError(_reranker_message(model, str(exc))) from None
    path = onnx_file(model_dir, quantized=quantized)
    if path is None:
        raise RerankerError(f"reranker model {model}: {model_dir} has no fp32 model (onnx/model.onnx)")
    key = (str(path.resolve()), threads)
    with _load_lock:
        found = _loaded.get(key)
        if found is None:
            found = _loaded[key] = CrossEncoder(model_dir, path, name=model, threads=threads)
    return found


def _reranker_message(model: str, message: str) -> str:
    """The resolver's line, said of a reranker rather than an embedding model."""
    message = one_line(message).replace("(a sentence-transformers checkpoint)", "(a cross-encoder checkpoint)")
    if message.startswith("embedding model "):
        return "reranker model " + message[len("embedding model ") :]
    return f"reranker model {model}: {message}"


class CrossEncoder:
    """One ONNX cross-encoder: scores (query, text) pairs as relevance log-odds."""

    def __init__(self, model_dir: Path, path: Path, *, name: str, threads: int) -> None:
        import onnxruntime as ort
        from tokenizers import Tokenizer

        from memsearch_fast.embeddings.onnx import session_options
        from memsearch_fast.parallelism import available_cpus

        self.name = name
        self.model_path = path
        self.threads = threads
        try:
            tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        except Exception as exc:  # noqa: BLE001 - tokenizers raises a bare Exception on bad JSON
            raise RerankerError(f"cannot load {model_dir / 'tokenizer.json'}: {one_line(exc)}") from None
        self.max_length = _max_length(model_dir)
        tokenizer.no_padding()
        tokenizer.enable_truncation(max_length=self.max_length)
        self._tokenizer = tokenizer
        # One run at a time per search: it may use every inference core.
        options = session_options(threads, spinning=threads < available_cpus())
        try:
            self._session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own exception types
            raise RerankerError(f"cannot load ONNX model {path}: {one_line(exc)}") from None
        self._inputs = {i.name for i in self._session.get_inputs()}
        outputs = self._session.get_outputs()
        out = next((o for o in outputs if o.name == _LOGITS), outputs[0])
        shape = list(out.shape)
        labels = shape[-1] if len(shape) == 2 else None
        if "input_ids" not in self._inputs or len(shape) != 2 or labels not in (1, 2, None):
            raise RerankerError(
                f"{name} is not a cross-encoder: its ONNX model outputs {out.name} {shape}, "
                "not relevance logits [batch, 1 or 2]; pass a reranker (e.g. a BertForSequenceClassification "
                "checkpoint imported with memsearch model import)"
            )
        self._output = out.name

    def __repr__(self) -> str:
        return f"CrossEncoder(model={self.name!r}, file={self.model_path.name!r}, threads={self.threads})"

    def logits(self, query: str, texts: Sequence[str]) -> np.ndarray:
        """Relevance log-odds of each (query, text) pair, in input order (float64).

        Pairs are tokenised as a sentence pair (token type 0 for the query, 1
        for the text) and run longest first, in batches of similar length
        under ``ATTENTION_BUDGET``, so each batch pads little.
        """
        import numpy as np

        pairs = [(query, text) for text in texts]
        try:
            encodings = self._tokenizer.encode_batch(pairs)
        except Exception:  # noqa: BLE001 - e.g. lone surrogates that cannot be encoded as UTF-8
            encodings = self._tokenizer.encode_batch([(_clean(q), _clean(t)) for q, t in pairs])
        lengths = np.fromiter((len(e.ids) for e in encodings), dtype=np.int64, count=len(encodings))
        order = np.argsort(-lengths, kind="stable")
        scores = np.empty(len(texts), dtype=np.float64)
        i = 0
        while i < len(order):
            longest = int(lengths[order[i]])
            rows = order[i : i + max(1, ATTENTION_BUDGET // max(1, longest * longest))]
            i += len(rows)
            ids = np.zeros((len(rows), longest), dtype=np.int64)
            mask = np.zeros_like(ids)
            types = np.zeros_like(ids)
            for r, j in enumerate(rows):
                enc = encodings[j]
                n = len(enc.ids)
                ids[r, :n] = enc.ids
                mask[r, :n] = 1
                types[r, :n] = enc.type_ids
            feed = {"input_ids": ids}
            if "attention_mask" in self._inputs:
                feed["attention_mask"] = mask
            if "token_type_ids" in self._inputs:
                feed["token_type_ids"] = types
            (raw,) = self._session.run([self._output], feed)
            scores[rows] = _log_odds(np.asarray(raw, dtype=np.float64), self.name)
        return scores

    def rerank(self, query: str, hits: list[dict[str, Any]], *, top_k: int) -> list[dict[str, Any]]:
        """The *top_k* of *hits* by the reranker; each keeps its fields, ``score``
        becomes the relevance probability and ``rerank_score`` the log-odds; an
        ``explain`` dict gains ``rerank_score`` and ``fused_rank`` (its place before)."""
        import numpy as np

        if not hits:
            return []
        logits = self.logits(query, [str(h.get("content") or "") for h in hits])
        ranked = []
        for i in np.argsort(-logits, kind="stable")[: max(0, top_k)]:  # ties keep the fused order
            logit = float(logits[i])
            row: dict[str, Any] = {}
            for key, value in hits[i].items():
                explained = key == "explain" and isinstance(value, dict)
                row[key] = {**value, "rerank_score": logit, "fused_rank": int(i) + 1} if explained else value
                if key == "score":
                    row["score"] = _sigmoid(logit)
                    row["rerank_score"] = logit
            row.setdefault("score", _sigmoid(logit))
            row.setdefault("rerank_score", logit)
            ranked.append(row)
        return ranked


def _log_odds(raw: np.ndarray, name: str) -> np.ndarray:
    """One score per row: the logit of a one-logit head, positive minus negative of a two-logit head."""
    if raw.ndim == 2 and raw.shape[1] == 1:
        return raw[:, 0]
    if raw.ndim == 2 and raw.shape[1] == 2:
        diff: np.ndarray = raw[:, 1] - raw[:, 0]
        return diff
    raise RerankerError(f"{name} is not a cross-encoder: it returned {list(raw.shape)} per batch, not [batch, 1 or 2]")


def _sigmoid(x: float) -> float:
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    z = math.exp(x)
    return z / (1.0 + z)


def _max_length(model_dir: Path) -> int:
    """``MAX_RERANK_TOKENS``, or the model's position limit when lower."""
    try:
        config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        config = {}
    limit = config.get("max_position_embeddings") if isinstance(config, dict) else None
    return min(MAX_RERANK_TOKENS, limit) if isinstance(limit, int) and limit >= 8 else MAX_RERANK_TOKENS


def _clean(text: str) -> str:
    return text.encode("utf-8", "replace").decode("utf-8")


def is_cross_encoder(model_dir: Path) -> bool:
    """Whether the model folder's ``config.json`` declares a ``*ForSequenceClassification`` head."""
    try:
        config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    archs = config.get("architectures") if isinstance(config, dict) else None
    return isinstance(archs, list) and any(str(a).endswith("ForSequenceClassification") for a in archs)
