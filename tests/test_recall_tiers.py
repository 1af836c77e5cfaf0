"""Agent output tiers on `search` (--budget, --digest, --min-score) and `get`,
run as real subprocesses against Milvus Lite and the shared ONNX model.

One index is built per module; every test reads it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.cli import make_env, ok, one_line_error, run

QUERY = "deploy the search service"
DIGEST_RE = re.compile(r"^(?P<source>.+):(?P<start>\d+)-(?P<end>\d+)(?: (?P<heading>.*))? (?P<score>-?\d+\.\d{4})$")

NOTES = {
    "deploy.md": "# Deploy\n\nThe search service deploys with `make ship` from the release branch.\n\n"
    "## Rollback\n\nRoll back the search service with `make rollback` and page the on-call.\n",
    "search.md": "# Search service\n\nThe search service runs hybrid dense and BM25 retrieval.\n\n"
    "## Tuning\n\nRaise top-k for the search service when recall drops after a deploy.\n",
    "cooking.md": "# Recipes\n\nBraise the onions slowly in butter for forty minutes.\n",
    "keys.md": "# Keys\n\nDeploy keys rotate every ninety days; the search service reads them at start.\n",
    'we"ird\\name.md': "# Odd\n\nA note whose name holds a quote and a backslash, about deploys.\n",
}


class Corpus:
    def __init__(self, root: Path, notes: Path, env: dict[str, str], common: list[str]) -> None:
        self.root, self.notes, self.env, self.common = root, notes, env, common

    def search(self, *args: str) -> str:
        return ok(run(["search", QUERY, "-k", "5", *args, *self.common], self.env)).stdout

    def get(self, *args: str) -> Any:
        return run(["get", *args, "--milvus-uri", self.common[1]], self.env)


# Its module fixtures are built once, on one worker (`--dist loadgroup`).
pytestmark = pytest.mark.xdist_group("recall_tiers")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory, model_dir: Path) -> Iterator[Corpus]:
    root = tmp_path_factory.mktemp("tiers")
    notes = root / "notes"
    notes.mkdir()
    for name, body in NOTES.items():
        (notes / name).write_text(body, encoding="utf-8")
    db = root / "m.db"
    env = make_env(root / "home")
    common = ["--milvus-uri", str(db), "-m", str(model_dir)]
    ok(run(["index", str(notes), *common], env))
    yield Corpus(root, notes, env, common)
    from memsearch_fast.lite import broker as lite_broker

    lite_broker.stop_server(str(db))


@pytest.fixture(scope="module")
def hits(corpus: Corpus) -> list[dict[str, Any]]:
    """The untiered search: `-j` is still the bare list of memsearch 0.4.23."""
    found = json.loads(corpus.search("-j"))
    assert isinstance(found, list) and len(found) == 5
    return found


@pytest.fixture(scope="module")
def tokens(model_dir: Path) -> Any:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    tok.no_truncation()
    tok.no_padding()
    return lambda text: len(tok.encode(text, add_special_tokens=False).ids)


def _pretty(data: Any) -> str:
    return json.dumps(data, indent=2, ensure_ascii=False)


def _digest(hit: dict[str, Any]) -> str:
    where = f"{hit['source']}:{hit['start_line']}-{hit['end_line']}"
    score = f"{hit['score']:.4f}"
    return f"{where} {hit['heading']} {score}" if hit["heading"] else f"{where} {score}"


# -- --budget ---------------------------------------------------------------------------


@pytest.mark.slow(reason="indexes through the CLI with the real model")
def test_budget_cuts_json_at_hit_boundaries_and_reports_dropped(
    corpus: Corpus, hits: list[dict[str, Any]], tokens: Any
) -> None:
    two = tokens(_pretty(hits[0])) + tokens(_pretty(hits[1]))
    out = json.loads(corpus.search("-j", "--budget", str(two)))
    assert set(out) == {"results", "dropped", "below_min_score", "budget", "tokens", "tokenizer"}
    assert out["results"] == hits[:2]  # whole hits, same shape as the bare list
    assert out["dropped"] == 3 and out["below_min_score"] == 0
    assert out["budget"] == two and out["tokens"] == two
    assert "tokenizer.json" in out["tokenizer"]

    # One token short of two hits: only the first fits.
    short = json.loads(corpus.search("-j", "--budget", str(two - 1)))
    assert short["results"] == hits[:1] and short["dropped"] == 4

    # Everything fits: nothing dropped.
    roomy = json.loads(corpus.search("-j", "--budget", "100000"))
    assert roomy["results"] == hits and roomy["dropped"] == 0


def test_budget_in_text_ends_with_the_dropped_line(corpus: Corpus, hits: list[dict[str, Any]], tokens: Any) -> None:
    lines = [_digest(h) for h in hits]
    budget = sum(tokens(line) for line in lines[:3])
    out = corpus.search("--digest", "--budget", str(budget)).splitlines()
    assert out[:3] == lines[:3]
    assert len(out) == 4
    assert out[3].startswith("[2 more hits dropped to stay within --budget") and "tokenizer.json" in out[3]

    # A budget smaller than the first hit drops every hit, and says so.
    full = corpus.search("--budget", "1").splitlines()
    assert full[0] == "No results found."
    assert full[-1].startswith("[5 more hits dropped")
    assert "--- Result" not in "\n".join(full)


# -- --digest ---------------------------------------------------------------------------


def test_digest_prints_one_line_per_hit(corpus: Corpus, hits: list[dict[str, Any]]) -> None:
    out = corpus.search("--digest").splitlines()
    assert out == [_digest(h) for h in hits]
    for line, hit in zip(out, hits, strict=True):
        m = DIGEST_RE.match(line)
        assert m, line
        assert m["source"] == hit["source"] and int(m["start"]) == hit["start_line"]
        assert int(m["end"]) == hit["end_line"] and float(m["score"]) == pytest.approx(hit["score"], abs=1e-4)

    data = json.loads(corpus.search("--digest", "-j"))
    assert data["dropped"] == 0 and data["budget"] is None and data["tokens"] is None
    assert [set(r) for r in data["results"]] == [
        {"source", "start_line", "end_line", "heading", "score", "chunk_hash"}
    ] * len(hits)
    assert [r["chunk_hash"] for r in data["results"]] == [h["chunk_hash"] for h in hits]


# -- --min-score ------------------------------------------------------------------------


def test_min_score_drops_low_hits(corpus: Corpus, hits: list[dict[str, Any]]) -> None:
    cut = hits[1]["score"]
    kept = [h for h in hits if h["score"] >= cut]
    data = json.loads(corpus.search("-j", "--min-score", repr(cut)))
    assert data["results"] == kept and data["below_min_score"] == len(hits) - len(kept)
    assert data["dropped"] == 0

    text = corpus.search("--min-score", repr(cut))
    assert text.count("--- Result ") == len(kept)
    assert corpus.search("--min-score", "1000").strip() == "No results found."


# -- get --------------------------------------------------------------------------------


@pytest.mark.slow(reason="indexes through the CLI with the real model")
def test_get_prints_lines_of_an_indexed_file(corpus: Corpus) -> None:
    path = corpus.notes / "deploy.md"
    body = NOTES["deploy.md"].split("\n")[:-1]

    whole = json.loads(ok(corpus.get(str(path), "-j")).stdout)
    assert whole == {
        "path": str(path.resolve()),
        "from": 1,
        "lines": len(body),
        "total_lines": len(body),
        "content": "\n".join(body),
    }
    part = json.loads(ok(corpus.get(str(path), "--from", "3", "--lines", "2", "-j")).stdout)
    assert part["from"] == 3 and part["lines"] == 2 and part["content"] == "\n".join(body[2:4])
    assert ok(corpus.get(str(path), "--from", "5", "-n", "1")).stdout == body[4] + "\n"
    past = json.loads(ok(corpus.get(str(path), "--from", "99", "-j")).stdout)
    assert past["lines"] == 0 and past["content"] == "" and past["total_lines"] == len(body)

    # A name that needs escaping in a Milvus filter.
    odd = json.loads(ok(corpus.get(str(corpus.notes / 'we"ird\\name.md'), "-j")).stdout)
    assert odd["content"].startswith("# Odd")

    # A symlink from outside to an indexed file reads the indexed file.
    link_in = corpus.root / "link-in.md"
    link_in.symlink_to(path)
    assert json.loads(ok(corpus.get(str(link_in), "-j")).stdout)["path"] == str(path.resolve())


@pytest.mark.slow(reason="indexes through the CLI with the real model")
def test_get_refuses_paths_outside_the_index(corpus: Corpus) -> None:
    secret = corpus.root / "secret.md"
    secret.write_text("# Secret\n\ntoken\n", encoding="utf-8")
    traversal = f"{corpus.notes}/../secret.md"
    link_out = corpus.notes / "link-out.md"
    link_out.symlink_to(secret)
    fresh = corpus.notes / "fresh.md"  # under a root, but never indexed
    fresh.write_text("# Fresh\n", encoding="utf-8")
    for path in (traversal, str(link_out), str(fresh), "/etc/passwd", str(corpus.notes)):
        proc = corpus.get(path)
        one_line_error(proc, "not an indexed file")
        assert "token" not in proc.stdout and proc.stdout == ""

    other = corpus.root / "other.db"
    try:
        missing = run(["get", str(fresh), "--milvus-uri", str(other)], corpus.env)
        one_line_error(missing, "does not exist", "memsearch index")
    finally:
        from memsearch_fast.lite import broker as lite_broker

        lite_broker.stop_server(str(other))
    bad = corpus.get(str(fresh), "--from", "0")
    assert bad.returncode == 2 and "--from" in bad.stderr
