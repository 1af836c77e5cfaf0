"""Retrieval quality: a generated corpus with planted facts, and the questions that should find them.

``python -m benches.retrieval --mb 5`` builds the corpus (``tests/helpers/corpus.py``
plus the facts), indexes it with the shared model, asks every question and
prints hit@1, hit@5, MRR@10 and warm search latency, per kind of fact and in
all. Kinds: ``port`` (an exact number, asked by the service's name),
``owner`` (a person's name), ``decision`` (a decision with its date),
``paraphrase`` (asked in words the fact does not use) and ``cjk`` (a Chinese
fact asked in Chinese). A hit is a result whose content holds the fact's
unique key. ``--hard N`` adds ``paraphrase_hard``: questions that share no
word with their fact but the project's name ("who gets woken up when X
breaks at night" for "Pager rota for X moves to ...").

``--tool reference`` indexes the same corpus with memsearch 0.4.23 (in the
Python that ``MEMSEARCH_TEST_REFERENCE_PYTHON`` names, as the tests run it) and the
same model: its ``openai`` provider is pointed at a local server that speaks
the OpenAI embeddings protocol and computes the vectors with our ONNX
provider (int8), and the questions go through its own hybrid search.
``--sparse-extra`` measures our tool with the chunk's heading and file stem
added to the BM25 input (a bench-only collection, see :func:`sparse_extra_store`).

``--set agent`` asks about a corpus shaped like real agent journals
(``benches/agent_corpus.py``: entries of 6-14 mixed bullets, facts as one
bullet among them, 10 look-alikes per fact, long doc sections), ``--set
dialogue`` about meetings rendered as daily memory files
(``benches/dialogue_corpus.py``: who said what, when, what happened after).
For our tool every set also reports each list alone (``lists``): the dense
list (the store searched with an empty query text) and the BM25 list
(``sparse_search``), next to the fused result; hit@10 as well.
``--set conversation`` asks about long conversations between two people
(``benches/conversation_corpus.py``: one session per day's log, one line per
turn), each question filtered to its conversation with ``source_prefix`` and
hit by its evidence lines; kinds ``single-hop``, ``temporal``, ``multi-hop``,
``open-domain``. ``--set chat`` is the same conversations with each turn's
time before or after the speaker, as chat logs are exported (``- [1:56 pm]
Maya: …``, ``**Maya** (13:56): …``). With ``MEMSEARCH_SPANS=0`` a run keeps its own database
(``…-nospans.db``) beside the default's in one work directory.
``--markdown`` prints the tables instead of the JSON. ``--sample N`` asks N of the questions,
drawn by the seed (the same N every run), for the conversation sets at 50 MB.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.helpers.corpus import write_corpus

ROOT = Path(__file__).resolve().parents[1]
MODEL_DIR = Path(
    os.environ.get("MEMSEARCH_TEST_MODEL_DIR", ROOT.parent / "shared" / "models" / "all-MiniLM-L6-v2-onnx")
)

_NAMES = "sierra tango juniper falcon orchid basalt quartz harbor meadow cobalt ember willow".split()
#: Names of the decoys: the same sentences about other things, with other values.
_DECOY_NAMES = "delta kestrel aspen granite lotus pioneer summit vega nimbus atlas".split()
_SERVICES = "staging gateway|billing worker|search proxy|metrics collector|auth broker|image resizer".split("|")
_PEOPLE = "Priya Okafor|Lars Lindqvist|Mei Tanaka|Diego Alvarez|Amara Nwosu|Jonas Weber|Sofia Rossi".split("|")
_COMPONENTS = "payment retry|session store|feature flag|audit log|thumbnail cache|webhook relay".split("|")
_TECH = "NATS|Redis Streams|SQLite|ClickHouse|Temporal|DuckDB".split("|")
_CITIES = ["杭州", "成都", "深圳", "南京", "西安", "武汉"]
_SYSTEMS = ["订单", "用户", "库存", "支付", "日志", "报表"]


@dataclass(frozen=True)
class Fact:
    kind: str
    text: str  # the bullet planted in a daily log
    question: str
    key: str  # unique text a hit must contain


def make_facts(count: int, seed: int = 7, names: list[str] = _NAMES) -> list[Fact]:
    rng = random.Random(seed)
    kinds = ["port", "owner", "decision", "paraphrase", "cjk"]
    facts: list[Fact] = []
    used: set[str] = set()
    for _attempt in range(count * 100):
        if len(facts) >= count:
            break
        kind = kinds[len(facts) % len(kinds)]
        name = rng.choice(names)
        if kind == "port":
            service = rng.choice(_SERVICES)
            port = str(rng.randint(20000, 29999))
            fact = Fact(
                kind,
                f"- The {name} {service} now listens on port {port} after the migration.",
                f"which port does the {name} {service} listen on",
                port,
            )
        elif kind == "owner":
            person, component = rng.choice(_PEOPLE), rng.choice(_COMPONENTS)
            key = f"{person} ({name})"
            fact = Fact(
                kind,
                f"- {key} took over ownership of the {name} {component} rollout.",
                f"who owns the {name} {component} rollout",
                key,
            )
        elif kind == "decision":
            tech, component = rng.choice(_TECH), rng.choice(_COMPONENTS)
            day = f"2024-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
            fact = Fact(
                kind,
                f"- Decided on {day} to move the {name} {component} queue to {tech}.",
                f"when did we decide to move the {name} {component} queue to {tech}",
                day,
            )
        elif kind == "paraphrase":
            minutes = str(rng.randint(11, 97))
            region = rng.choice(["eu-west", "us-east", "ap-south", "sa-east", "af-north", "me-central"])
            fact = Fact(
                kind,
                f"- A cron job flushes the {name} {region} edge cache every {minutes} minutes.",
                f"how often is the {name} {region} CDN cache cleared",
                f"every {minutes} minutes",
            )
        else:
            city, system = rng.choice(_CITIES), rng.choice(_SYSTEMS)
            hour = str(rng.randint(1, 5))
            key = f"{city}{system}数据库备份在凌晨{hour}点"
            fact = Fact(kind, f"- {key}运行，保留三十天。", f"{city}的{system}数据库什么时候备份", key)
        if fact.key not in used and fact.question not in {f.question for f in facts}:
            used.add(fact.key)
            facts.append(fact)
    return facts


_GIBS = ["6", "12", "24", "48", "96"]


def make_hard_facts(count: int, seed: int = 13, names: list[str] = _NAMES) -> list[Fact]:
    """Paraphrases that share no word with their question but the project's name:
    the question says what a user would ask, the fact what a log would say."""
    rng = random.Random(seed)
    facts: list[Fact] = []
    for _attempt in range(count * 100):
        if len(facts) >= count:
            break
        name, n = rng.choice(names), rng.randint(100, 999)
        template = len(facts) % 5
        if template == 0:
            key = f"#{name}-oncall-{n}"
            text = f"- Pager rota for {name} moves to {rng.choice(_PEOPLE)}; alerts go to {key}."
            question = f"who gets woken up when {name} breaks at night"
        elif template == 1:
            key = f"day {rng.randint(2, 27)} of each month"
            text = f"- {name} invoices are generated on {key} by the ledger job (ref {n})."
            question = f"when do {name} customers receive their bill"
        elif template == 2:
            key = f"{rng.choice(_GIBS)} GiB, ticket {n}"
            text = f"- Raised worker memory for {name} to {key} after repeated OOM kills."
            question = f"how much RAM did the {name} machines get once they kept crashing"
        elif template == 3:
            key = f"older than Android {rng.randint(8, 12)}.{n % 10}"
            text = f"- The {name} mobile client drops devices {key} next release."
            question = f"which old phones will the {name} app stop running on"
        else:
            key = f"{rng.randint(2, 9)} reviewers, rule {n}"
            text = f"- Merges into {name} main now need {key} before the bot lands them."
            question = f"how many approvals does a {name} pull request require"
        fact = Fact("paraphrase_hard", text, question, key)
        if fact.key not in {f.key for f in facts} and fact.question not in {f.question for f in facts}:
            facts.append(fact)
    return facts


def _same_kind(kind: str, count: int, seed: int, names: list[str]) -> list[Fact]:
    """Facts of ``kind``'s generator about ``names`` (decoys and twins)."""
    if kind == "paraphrase_hard":
        return make_hard_facts(count, seed, names)
    return make_facts(count, seed, names)


def plant(root: Path, facts: list[Fact], seed: int = 7) -> None:
    """Append each fact as its own ``### HH:MM`` entry to a daily log of the corpus,
    with decoys: the same kind of sentence about other names, and about the same
    name with another service, component or system (so the name alone is not enough)."""
    rng = random.Random(seed)
    logs = sorted((root / "memory").glob("*.md"))
    keys = {f.key for f in facts}
    plain = [f for f in facts if f.kind != "paraphrase_hard"]
    hard = [f for f in facts if f.kind == "paraphrase_hard"]
    decoys = [d for d in make_facts(len(plain) * 4, seed + 1, _DECOY_NAMES) if d.key not in keys][: len(plain) * 2]
    if hard:
        decoys += [d for d in make_hard_facts(len(hard) * 4, seed + 2, _DECOY_NAMES) if d.key not in keys][
            : len(hard) * 2
        ]
    questions = {f.question for f in facts}
    for i, fact in enumerate(facts):
        name = next((n for n in _NAMES if f" {n} " in f" {fact.question} "), None)
        if name is None:
            continue
        same = _same_kind(fact.kind, 10, seed + 100 + i, [name])
        twins = [d for d in same if d.kind == fact.kind and d.key not in keys and d.question not in questions]
        decoys += twins[:2]
    for fact in [*facts, *decoys]:
        log = rng.choice(logs)
        stamp = f"{rng.randint(8, 22):02d}:{rng.randint(0, 59):02d}"
        with log.open("a", encoding="utf-8") as f:
            f.write(f"\n### {stamp}\n{fact.text}\n- The rest of the session was routine.\n")


def planted_facts(facts: int, hard: int = 0, seed: int = 0, by_key: bool = False) -> list[Fact]:
    """The facts of a run; ``seed`` 0 is the default set, another draws other facts;
    ``by_key``: each asked by its exact key instead (the lookup BM25 is for)."""
    planted = make_facts(facts, seed=7 + seed) + make_hard_facts(hard, seed=13 + seed)
    return [Fact(f.kind, f.text, f.key, f.key) for f in planted] if by_key else planted


def build(root: Path, megabytes: float, facts: int, hard: int = 0, seed: int = 0) -> list[Fact]:
    write_corpus(root, total_bytes=int(megabytes * 1_000_000), seed=3 + seed)
    planted = planted_facts(facts, hard, seed)
    plant(root, planted, seed=7 + seed)
    return planted


def rank_of(hits: list[dict[str, Any]], key: str) -> int | None:
    for i, hit in enumerate(hits, start=1):
        if key in str(hit.get("content", "")):
            return i
    return None


def rank_for(hits: list[dict[str, Any]], fact: Any) -> int | None:
    """*fact*'s rank in *hits*: by its evidence lines where it has them (a hit's line
    range holds one, in the same file), else by its key in the content."""
    evidence = getattr(fact, "evidence", None)
    if evidence is None:
        return rank_of(hits, fact.key)
    for i, hit in enumerate(hits, start=1):
        source, start, end = str(hit.get("source")), int(hit.get("start_line") or 0), int(hit.get("end_line") or 0)
        if any(source == path and start <= line <= end for path, line in evidence):
            return i
    return None


def p95(ordered: list[float]) -> float:
    """The 95th percentile of *ordered* (sorted ascending), the nearest rank."""
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def scores(rs: list[int | None]) -> dict[str, float]:
    """hit@1, hit@5, hit@10 and MRR@10 of the ranks (None: not found)."""
    n = len(rs) or 1
    return {
        "n": len(rs),
        "hit@1": round(sum(1 for r in rs if r == 1) / n, 3),
        "hit@5": round(sum(1 for r in rs if r is not None and r <= 5) / n, 3),
        "hit@10": round(sum(1 for r in rs if r is not None and r <= 10) / n, 3),
        "mrr@10": round(sum(1 / r for r in rs if r is not None and r <= 10) / n, 3),
    }


def scored(ranks: list[int | None], facts: list[Any]) -> dict[str, Any]:
    """``all`` and ``by_kind`` scores."""
    by_kind = {}
    for kind in dict.fromkeys(f.kind for f in facts):
        by_kind[kind] = scores([r for r, f in zip(ranks, facts, strict=True) if f.kind == kind])
    return {"all": scores(ranks), "by_kind": by_kind}


def evaluate(ms: Any, facts: list[Any], top_k: int = 10, *, lists: bool = False) -> dict[str, Any]:
    """hit@1, hit@5, hit@10, MRR@10 per kind and overall, and search latency; with
    *lists* (our tool), also the dense list alone and the BM25 list alone."""

    async def ask() -> tuple[list[int | None], list[float], dict[str, list[int | None]], int]:
        ranks, took = [], []
        alone: dict[str, list[int | None]] = {"dense": [], "sparse": []}
        dense_by_copy = 0
        await ms.search(facts[0].question, top_k=top_k)  # warm: model and store loaded
        for fact in facts:
            prefix = getattr(fact, "prefix", None)  # a question about one conversation of a shared store
            start = time.perf_counter()
            hits = await ms.search(fact.question, top_k=top_k, source_prefix=prefix)
            took.append(time.perf_counter() - start)
            ranks.append(rank_for(hits, fact))
            if lists:
                vector = await ms.provider.embed_query(fact.question)
                # An empty query text ranks by the dense list alone, through the copy when the
                # fused list went through it (it scores every span; the store past its cap does not).
                dense, by_copy = await asyncio.to_thread(_dense_alone, ms, vector, top_k, prefix)
                dense_by_copy += by_copy
                sparse = await asyncio.to_thread(
                    ms.store.sparse_search, fact.question, top_k=top_k, source_prefix=prefix
                )
                alone["dense"].append(rank_for(dense, fact))
                alone["sparse"].append(rank_for(sparse, fact))
        return ranks, took, alone, dense_by_copy

    ranks, took, alone, dense_by_copy = asyncio.run(ask())
    out = _scored_run(ranks, took, facts)
    if lists:
        out["lists"] = {name: scored(rs, facts) for name, rs in alone.items()}
        out["dense_by_copy"] = dense_by_copy  # questions whose dense list the copy gave; the store the rest
    return out


def _dense_alone(ms: Any, vector: Any, top_k: int, prefix: str | None) -> tuple[list[dict[str, Any]], bool]:
    """The dense list alone by the path the fused list took (the in-memory copy when
    loaded), and whether the copy answered."""
    store, copy = ms.store, ms._dense
    if copy is not None and copy.loaded:
        hits = copy.search(store, vector, "", top_k=top_k, source_prefix=prefix)
        if hits is not None:
            return hits, True
    return list(store.search(vector, "", top_k=top_k, source_prefix=prefix)), False


def _scored_run(ranks: list[int | None], took: list[float], facts: list[Any]) -> dict[str, Any]:
    """The scores of one tool's answers, their latency and the questions missed at 5."""
    took = sorted(took)
    return {
        **scored(ranks, facts),
        "latency_ms": {
            "p50": round(statistics.median(took) * 1000, 1),
            "p95": round(p95(took) * 1000, 1),
        },
        "missed": [f.question for r, f in zip(ranks, facts, strict=True) if r is None or r > 5],
    }


def markdown(report: dict[str, Any]) -> str:
    """The report's scores as a markdown table: one row per list and kind."""
    metrics = ["hit@1", "hit@5", "hit@10", "mrr@10"]
    rows = ["| list | kind | n | " + " | ".join(metrics) + " |", "|" + "---|" * (len(metrics) + 3)]
    fused = "fused" if report.get("tool") == "ours" else str(report.get("tool"))
    named = [*((k, v) for k, v in report.get("lists", {}).items()), (fused, report)]
    for name, part in named:
        for kind, sc in [*part["by_kind"].items(), ("**all**", part["all"])]:
            rows.append(f"| {name} | {kind} | {sc['n']} | " + " | ".join(f"{sc[m]:.3f}" for m in metrics) + " |")
    return "\n".join(rows)


#: The model name the reference is given: one it does not know, so it asks the
#: server for a trial vector to learn the dimension instead of assuming 1536.
REFERENCE_MODEL = "all-MiniLM-L6-v2-int8-local"


@contextmanager
def embedding_server(model_dir: Path = MODEL_DIR) -> Iterator[str]:
    """An OpenAI-compatible ``POST /v1/embeddings`` on 127.0.0.1 whose vectors come
    from our ONNX provider (the int8 file our index uses); yields the base URL."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from memsearch_fast.embeddings import get_provider

    provider = get_provider("onnx", model=str(model_dir))

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
            texts = body.get("input")
            texts = [texts] if isinstance(texts, str) else texts
            if self.path.rstrip("/") != "/v1/embeddings" or not isinstance(texts, list):
                self._reply(400, {"error": {"message": "expected POST /v1/embeddings with an input list"}})
                return
            vectors = provider.embed_sync([str(t) for t in texts]).tolist() if texts else []  # type: ignore[attr-defined]
            data = [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)]
            usage = {"prompt_tokens": 0, "total_tokens": 0}
            self._reply(200, {"object": "list", "data": data, "model": body.get("model", ""), "usage": usage})

        def _reply(self, status: int, payload: dict[str, Any]) -> None:
            raw = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: one line per request would drown the report."""

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()
        provider.close()


def sparse_extra_store(uri: str, collection: str, dimension: int, model: Any) -> Any:
    """Our store, except that BM25 reads ``bm25_text`` = heading + file stem + content;
    ``content`` (what a hit shows) and every other field stay as they are."""
    from memsearch_fast.store import milvus, rows

    class SparseExtra(milvus.MilvusStore):
        """Bench-only: the product's schema plus a ``bm25_text`` VARCHAR, with the BM25
        function moved from ``content`` onto it; rows get the field in ``_prepare_row``.
        Searches are the product's (same hybrid request on ``sparse_vector``)."""

        def _create_with(self, analyzer: dict[str, Any]) -> None:
            real = self._client
            self._client = _BM25OnExtraText(real)
            try:
                super()._create_with(analyzer)
            finally:
                self._client = real

        def _prepare_row(self, row: dict[str, Any]) -> dict[str, Any]:
            out = super()._prepare_row(row)
            prefix = f"{out['heading']} {Path(out['source']).stem}\n"
            room = rows.MAX_CONTENT_BYTES - len(prefix.encode("utf-8"))
            content = str(out["content"])
            out["bm25_text"] = prefix + content[: rows.utf8_cut(content, room)]
            return out

    return SparseExtra(uri, collection=collection, dimension=dimension, model=model)


class _BM25OnExtraText:
    """A client whose ``create_collection`` adds ``bm25_text`` (analysed like
    ``content``) and feeds the BM25 function from it; every other call passes through."""

    def __init__(self, client: Any) -> None:
        self._client = client

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def create_collection(self, collection_name: str, schema: Any, index_params: Any, **kw: Any) -> Any:
        from pymilvus import CollectionSchema, DataType

        from memsearch_fast.store.rows import MAX_CONTENT_BYTES

        spec = schema.to_dict()
        content = next(f for f in spec["fields"] if f["name"] == "content")
        params = {**content["params"], "max_length": MAX_CONTENT_BYTES}
        spec["fields"].append({"name": "bm25_text", "type": DataType.VARCHAR, "description": "", "params": params})
        for fn in spec["functions"]:
            if fn["output_field_names"] == ["sparse_vector"]:
                fn["input_field_names"] = ["bm25_text"]
        return self._client.create_collection(
            collection_name=collection_name,
            schema=CollectionSchema.construct_from_dict(spec),
            index_params=index_params,
            **kw,
        )


def layout(workdir: Path, corpus_set: str) -> tuple[Path, str]:
    """Where a set's corpus lies in *workdir*, and the prefix of its databases' names
    (``m.db`` for the planted facts, ``agent-m.db`` … for another set)."""
    if corpus_set == "default":
        return workdir / "corpus", ""
    return workdir / f"corpus-{corpus_set}", f"{corpus_set}-"


def conversation_questions(corpus: Path, saved: Path, megabytes: float, seed: int, style: str = "plain") -> list[Any]:
    """The questions of the conversation set, its corpus written first when missing
    (the questions name lines, so they are kept beside it), with absolute paths."""
    from dataclasses import replace

    from benches import conversation_corpus

    if not corpus.exists():
        questions = conversation_corpus.build(corpus, megabytes, seed, style)
        saved.write_text(json.dumps([q.__dict__ for q in questions]), encoding="utf-8")
    loaded = [conversation_corpus.Question(**q) for q in json.loads(saved.read_text(encoding="utf-8"))]
    root = corpus.resolve()
    return [
        replace(
            q,
            prefix=str(root / q.prefix),
            evidence=tuple((str(root / rel), int(line)) for rel, line in q.evidence),
        )
        for q in loaded
    ]


def run(
    megabytes: float,
    facts: int,
    workdir: Path,
    *,
    tool: str = "ours",
    sparse_extra: bool = False,
    hard: int = 0,
    seed: int = 0,
    by_key: bool = False,
    corpus_set: str = "default",
    copy: bool = False,
    sample: int = 0,
) -> dict[str, Any]:
    """Build (unless *workdir* holds a corpus already), index, evaluate.

    Each variant has its own database in *workdir* (``m.db``, ``sparse_extra.db``,
    ``reference.db``; ``agent-m.db`` … for another set), so one corpus serves all of them.
    """
    planted: list[Any]
    corpus, prefix = layout(workdir, corpus_set)
    if corpus_set == "default":
        if not corpus.exists():
            build(corpus, megabytes, facts, hard, seed)
        planted = planted_facts(facts, hard, seed, by_key)
    elif corpus_set in ("conversation", "chat"):  # chat: the same conversations, turns as chat logs write them
        style = "chat" if corpus_set == "chat" else "plain"
        saved = workdir / f"{corpus_set}-questions.json"
        planted = conversation_questions(corpus, saved, megabytes, seed, style)
    else:
        from benches import agent_corpus, dialogue_corpus

        module = agent_corpus if corpus_set == "agent" else dialogue_corpus
        if not corpus.exists():
            module.build(corpus, megabytes, facts, seed)
        planted = agent_corpus.make_facts(facts, seed)[0] if module is agent_corpus else module.make_facts(facts, seed)
    asked = len(planted)
    if 0 < sample < asked:  # the same questions every run of a seed, in their order
        keep = sorted(random.Random(f"sample-{seed}").sample(range(asked), sample))
        planted = [planted[i] for i in keep]
    if tool == "reference":
        index_s, report = _run_reference(corpus, workdir / f"{prefix}reference.db", planted)
    else:
        spans = "" if os.environ.get("MEMSEARCH_SPANS", "1") != "0" else "-nospans"  # both in one workdir
        db = workdir / (f"{prefix}sparse_extra{spans}.db" if sparse_extra else f"{prefix}m{spans}.db")
        index_s, report = _run_ours(corpus, db, planted, sparse_extra=sparse_extra, copy=copy)
    report["set"] = corpus_set
    report["tool"] = tool
    if sparse_extra:
        report["sparse_extra"] = True
    report["corpus_mb"] = megabytes
    if len(planted) < asked:
        report["sampled"] = {"asked": len(planted), "of": asked}
    report.update(seed=seed, by_key=by_key)
    report["index_s"] = round(index_s, 1)
    return report


def _run_ours(
    corpus: Path, db: Path, planted: list[Any], *, sparse_extra: bool, copy: bool = False
) -> tuple[float, dict[str, Any]]:
    from memsearch_fast import MemSearch
    from memsearch_fast.lite import broker

    ms = MemSearch([str(corpus)], embedding_model=str(MODEL_DIR), milvus_uri=str(db), collection="retrieval")
    try:
        if sparse_extra:
            ms._store = sparse_extra_store(str(db), "retrieval", ms.provider.dimension, ms._embedding_model())
        start = time.perf_counter()
        asyncio.run(ms.index())
        index_s = time.perf_counter() - start
        if copy:  # the fused list through the in-memory copy (int8 span codes), as the service searches
            ms.close()
            os.environ["MEMSEARCH_DENSE_INDEX_MIN_ROWS"] = "0"
            ms = MemSearch(
                [str(corpus)],
                embedding_model=str(MODEL_DIR),
                milvus_uri=str(db),
                collection="retrieval",
                dense_index=True,
            )
            asyncio.run(ms.search(planted[0].question))
            if ms._dense is None or not ms._dense.wait(600):
                raise RuntimeError("the in-memory copy did not load")
        return index_s, evaluate(ms, planted, lists=True)
    finally:
        ms.close()
        broker.stop_server(str(db))


#: What runs in the reference's own Python: index the corpus, then answer every question.
_REFERENCE_SCRIPT = """
import asyncio, json, sys, time
from memsearch.core import MemSearch
req = json.load(sys.stdin)
ms = MemSearch([req["corpus"]], embedding_provider="openai", embedding_model=req["model"],
               embedding_base_url=req["base_url"], embedding_api_key="local",
               milvus_uri=req["db"], collection="retrieval")
async def main():
    start = time.perf_counter()
    await ms.index()
    index_s = time.perf_counter() - start
    await ms.search(req["questions"][0], top_k=req["top_k"])  # warm: model and store loaded
    answers = []
    for q in req["questions"]:
        start = time.perf_counter()
        hits = await ms.search(q, top_k=req["top_k"])
        answers.append({"took": time.perf_counter() - start, "contents": [h.get("content", "") for h in hits]})
    return index_s, answers
try:
    index_s, answers = asyncio.run(main())
finally:
    ms.close()
json.dump({"index_s": index_s, "answers": answers}, sys.stdout)
"""


def _run_reference(corpus: Path, db: Path, planted: list[Any], top_k: int = 10) -> tuple[float, dict[str, Any]]:
    """memsearch 0.4.23 in a Python of its own (``MEMSEARCH_TEST_REFERENCE_PYTHON``, as the
    tests run it: installed beside ours, the two would share one ``bin/memsearch``): its
    default chunking, its Milvus Lite, its search; the vectors come from this process."""
    import subprocess

    python = os.environ.get("MEMSEARCH_TEST_REFERENCE_PYTHON")
    if not python:
        raise SystemExit("--tool reference needs MEMSEARCH_TEST_REFERENCE_PYTHON (README: Run the tests)")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith("MEMSEARCH_")}
    with embedding_server() as base_url:
        request = {
            "corpus": str(corpus),
            "db": str(db),
            "base_url": base_url,
            "model": REFERENCE_MODEL,
            "questions": [f.question for f in planted],
            "top_k": top_k,
        }
        done = subprocess.run(
            [python, "-c", _REFERENCE_SCRIPT], input=json.dumps(request), capture_output=True, text=True, env=env
        )
    if done.returncode != 0:
        raise SystemExit(f"the reference failed: {done.stderr.strip()[-2000:]}")
    result = json.loads(done.stdout)
    answers = result["answers"]
    ranks = [rank_of([{"content": c} for c in a["contents"]], f.key) for a, f in zip(answers, planted, strict=True)]
    return float(result["index_s"]), _scored_run(ranks, [a["took"] for a in answers], planted)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=5.0, help="corpus size in MB (default 5)")
    parser.add_argument("--facts", type=int, default=40, help="planted facts (default 40)")
    parser.add_argument(
        "--hard",
        type=int,
        default=0,
        help="also plant this many paraphrases that share only the project's name with their question (default 0)",
    )
    parser.add_argument("--seed", type=int, default=0, help="another corpus and other facts (default 0)")
    parser.add_argument("--by-key", action="store_true", help="ask each fact by its exact key instead")
    parser.add_argument(
        "--set",
        choices=["default", "agent", "dialogue", "conversation", "chat"],
        default="default",
        help=(
            "default: the planted-facts corpus; agent: agent journals with look-alikes; dialogue: meetings; "
            "conversation: long two-person conversations, asked one conversation at a time; "
            "chat: the same with each turn's time, as chat logs write them"
        ),
    )
    parser.add_argument(
        "--sample",
        type=int,
        default=0,
        help="ask this many of the questions, drawn by the seed (the conversation sets hold ~38,000 at 50 MB)",
    )
    parser.add_argument("--markdown", action="store_true", help="print the scores as markdown tables")
    parser.add_argument("--workdir", type=Path, help="keep the corpus and database here (reused when present)")
    parser.add_argument(
        "--analyzer", help='BM25 analyzer of a new collection as JSON, e.g. \'{"tokenizer": "jieba"}\' (default: ours)'
    )
    parser.add_argument(
        "--tool",
        choices=["ours", "reference"],
        default="ours",
        help="index and search with this tool (reference: memsearch 0.4.23, same model behind a local server)",
    )
    parser.add_argument(
        "--copy", action="store_true", help="ours only: search through the in-memory copy, as the service does"
    )
    parser.add_argument(
        "--sparse-extra",
        action="store_true",
        help="ours only: a collection whose BM25 input is heading + file stem + content",
    )
    args = parser.parse_args()
    if args.sparse_extra and args.tool != "ours":
        parser.error("--sparse-extra applies to --tool ours")
    if args.set != "default" and (args.hard or args.by_key):
        parser.error("--hard and --by-key apply to --set default")
    if args.analyzer:
        from memsearch_fast.store import schema

        schema.CJK_ANALYZER = json.loads(args.analyzer)
    options: dict[str, Any] = dict(
        tool=args.tool,
        sparse_extra=args.sparse_extra,
        copy=args.copy,
        hard=args.hard,
        seed=args.seed,
        by_key=args.by_key,
        corpus_set=args.set,
        sample=args.sample,
    )
    if args.workdir:
        args.workdir.mkdir(parents=True, exist_ok=True)
        report = run(args.mb, args.facts, args.workdir, **options)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            report = run(args.mb, args.facts, Path(tmp), **options)
    if args.markdown:
        took = report["latency_ms"]
        print(f"set {report['set']}, tool {report['tool']}, {report['corpus_mb']} MB, index {report['index_s']} s,")
        print(f"search p50 {took['p50']} ms, p95 {took['p95']} ms\n")
        print(markdown(report))
        return
    json.dump(report, sys.stdout, indent=2, ensure_ascii=False)
    print()


if __name__ == "__main__":
    main()
