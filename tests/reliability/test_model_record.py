"""A collection says which embedding model built it, and refuses another.

Two models of the same dimension used to mix silently: a search embedded its
query with one and compared it with vectors of the other (meaningless
results), and an index added the other's vectors beside the first's. A new
collection now records its model in its ``embedding`` field's description;
a collection without a record (memsearch 0.4.23's, or an older one of ours)
is judged by its chunk ids, which hash the model name. Real ``memsearch``
subprocesses on real Milvus Lite databases; the second model is the shared
one under another name (the name is what identifies a model).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from memsearch_fast.store import EmbeddingModel, MilvusStore
from tests.helpers.harness import cli_env, corpus, index_args, memsearch, ok, one_line_error, stop_servers
from tests.helpers.reference import environment
from tests.helpers.reference import require as reference_python

pytestmark = pytest.mark.skipif(os.name != "posix", reason="the shared server needs fcntl and fork")


def renamed_model(shared: Path, dest: Path) -> Path:
    """The shared model under another name: its files linked into ``dest``."""
    (dest / "onnx").mkdir(parents=True)
    for rel in ("tokenizer.json", "config.json", "sentence_bert_config.json", "onnx/model_quantized.onnx"):
        (dest / rel).symlink_to(shared / rel)
    return dest


def reference(code: str, db: Path) -> str:
    """Run ``code`` with memsearch 0.4.23's store on ``db`` (embedded Lite, in a process of its own)."""
    stop_servers(db.parent)  # the reference opens the database in-process
    script = f"import sys\nfrom memsearch.store import MilvusStore\ndb = {str(db)!r}\n{code}"
    proc = subprocess.run(
        [reference_python(), "-c", script], env=environment(), capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def recorded(db: Path) -> EmbeddingModel | None:
    store = MilvusStore(str(db))
    try:
        return store.recorded_model
    finally:
        store.close()


@pytest.mark.slow(reason="indexes one collection with two models (and memsearch 0.4.23) through the CLI")
def test_a_collection_records_its_model_and_refuses_another(work: Path, model_dir: Path) -> None:
    notes = work / "notes"
    corpus(notes, 5_000, seed=41)
    db = work / "m.db"
    env = cli_env(work / "home")
    other = renamed_model(model_dir, work / "other-model")
    ok(memsearch(index_args([notes], db, model_dir, "-q"), env))
    assert recorded(db) == EmbeddingModel("onnx", str(model_dir.resolve()))

    search = ["search", "cache warming", "--milvus-uri", str(db)]
    for args in ([*search, "-m", str(other)], index_args([notes], db, other, "-q")):
        line = one_line_error(memsearch(args, env), str(model_dir.resolve()), str(other), "memsearch reset")
        assert f"--model {model_dir.resolve()}" in line

    # The model that built it, spelled relatively, still searches; stats loads no model.
    rel = os.path.relpath(model_dir, work)
    assert "Result 1" in ok(memsearch([*search, "-m", rel], env, cwd=work)).stdout
    assert "Total indexed chunks" in ok(memsearch(["stats", "--milvus-uri", str(db)], env)).stdout

    # After a reset the other model builds (and records) a new collection.
    ok(memsearch(["reset", "--milvus-uri", str(db), "--yes"], env))
    ok(memsearch(index_args([notes], db, other, "-q"), env))
    assert recorded(db) == EmbeddingModel("onnx", str(other))
    one_line_error(memsearch([*search, "-m", str(model_dir)], env), str(other), str(model_dir.resolve()))


def test_memsearch_0423_reads_and_writes_a_recorded_collection(work: Path, model_dir: Path) -> None:
    notes = work / "notes"
    corpus(notes, 3_000, seed=42)
    db = work / "m.db"
    env = cli_env(work / "home")
    ok(memsearch(index_args([notes], db, model_dir, "-q"), env))
    out = reference(
        "s = MilvusStore(db, dimension=384)\n"
        "n = s.count()\n"
        "row = s.query()[0]\n"
        "row = {k: row[k] for k in ('content', 'source', 'heading', 'heading_level', 'start_line', 'end_line')}\n"
        "row.update(chunk_hash='f' * 16, embedding=[1 / 384**0.5] * 384)\n"
        "s.upsert([row])\n"
        "print(n, s.count())\n"
        "s.close()\n",
        db,
    )
    before, after = map(int, out.split()[-2:])
    assert after == before + 1
    assert recorded(db) == EmbeddingModel("onnx", str(model_dir.resolve()))
    ok(memsearch(["search", "cache", "--milvus-uri", str(db), "-m", str(model_dir)], env))


@pytest.mark.slow(reason="indexes one collection with two models (and memsearch 0.4.23) through the CLI")
def test_a_collection_without_a_record_is_judged_by_its_chunk_ids(work: Path, model_dir: Path) -> None:
    """Created by memsearch 0.4.23 (no record), then indexed by us: the ids tell the model."""
    notes = work / "notes"
    corpus(notes, 5_000, seed=43)
    db = work / "m.db"
    env = cli_env(work / "home")
    reference("MilvusStore(db, dimension=384, _create_if_missing=True).close()\n", db)
    ok(memsearch(index_args([notes], db, model_dir, "-q"), env))
    assert recorded(db) is None

    search = ["search", "cache warming", "--milvus-uri", str(db)]
    assert "Result 1" in ok(memsearch([*search, "-m", str(model_dir)], env)).stdout
    other = renamed_model(model_dir, work / "other-model")
    for args in ([*search, "-m", str(other)], index_args([notes], db, other, "-q")):
        one_line_error(memsearch(args, env), "another model than", str(other), "memsearch reset")
    # Nothing was written by the refused index.
    again = ok(memsearch(index_args([notes], db, model_dir), env))
    assert "0 changed" in again.stdout and "0 embedded" in again.stdout, again.stdout
