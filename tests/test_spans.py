"""Span vectors: a chunk is found by its best line, and its spans follow it through
renames, edits, deletes, resets and a collection indexed before spans existed.
Real Milvus Lite and the shared ONNX model."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest

from memsearch_fast import MemSearch
from memsearch_fast.index.spans import spans
from memsearch_fast.store.manifest import Manifest
from memsearch_fast.store.spans.collection import FIELDS

FILLER = [
    "Ran the aspen integration suite again; 214 tests passed and 3 were skipped on CI.",
    "Looked at the flaky retry test in tests/test_sync.py; it passes locally every time.",
    "Renamed the config loader helpers in src/aspen/config.py for readability.",
    "Reviewed the pull request that moves the aspen worker pool to asyncio tasks.",
    "Discussed the release notes for aspen 2.4 with the docs team; draft is ready.",
    "Cleaned up three stale feature flags in the aspen admin console.",
    "Checked the aspen dashboard; error rate flat at 0.2 % over the last day.",
    "Upgraded the aspen lint toolchain; ruff found two unused imports.",
    "Paired on the aspen migration script; the dry run finished without errors.",
    "Wrote a short design note on aspen cache eviction and shared it.",
    "Triaged two aspen bug reports about slow page loads; both need profiles.",
]
FACT = "The aspen nightly export now writes its archive to the cold bucket named glacier-otter-7."


def journal(fact_last: bool = True) -> str:
    bullets = [*FILLER, FACT] if fact_last else FILLER
    body = "\n".join(f"- {b}" for b in bullets)
    return (
        "# 2026-11-20\n\n## Session 10:00\n\n### 10:00\n"
        "<!-- session:s1 turn:t1 transcript:/tmp/t.jsonl -->\n" + body + "\n\n### 11:00\n- Short entry about lunch.\n"
    )


def test_a_chunk_becomes_spans_of_its_lines() -> None:
    content = (
        "### 10:00\n<!-- session:a turn:b transcript:/t.jsonl -->\n"
        "- first bullet about the build\n  its continuation line\n- second bullet\n"
        + "- "
        + "A long sentence about the parser. " * 12
        + "\n"
    )
    out = spans(content, "Parser notes", 5, budget=64)
    assert [s.index for s in out] == list(range(1, len(out) + 1))
    assert out[0].start_line == 7 and out[0].end_line == 8
    assert out[0].text == "Parser notes\n- first bullet about the build its continuation line"
    assert all("session:" not in s.text and "###" not in s.text for s in out)
    assert len(out) > 3  # the long paragraph is cut at its sentences
    assert spans("### 10:00\n- one bullet only\n", "10:00", 1) == []  # one span: the chunk's own vector

    # A heading without a word (a journal entry's time, a date) is no context for the model.
    for heading in ("### 10:00", "## 2026-11-26", "10:00 (2)"):
        assert [s.text for s in spans(content, heading, 5, budget=64)] == [s.text.split("\n", 1)[1] for s in out]


def _sentences(text: str) -> list[str]:
    """The spans of *text* as the first line of a chunk long enough to have spans."""
    pad = "- a second line, long enough that the chunk gets spans of its own lines " * 5
    return [s.text for s in spans(f"{text}\n{pad}", "", 1) if s.start_line == 1]


def test_sentences_end_at_their_stop_and_short_ones_join_a_neighbour() -> None:
    first = "The migration took an advisory lock on the table."
    second = "Then the deploy waited for it to be released."
    assert _sentences(f"{first}  {second}") == [first, second]  # the white space between goes
    assert _sentences(f"{first}\t{second}") == [first, second]
    assert _sentences(f"v1.2 shipped on 3.4 rc... {second}") == [f"v1.2 shipped on 3.4 rc... {second}"]
    # CJK stops end a sentence without white space; one of under 40 bytes joins the next
    assert _sentences("我们明天去北京看望祖母和外公外婆。然后回家吃晚饭和看电视节目。") == [
        "我们明天去北京看望祖母和外公外婆。",
        "然后回家吃晚饭和看电视节目。",
    ]
    assert _sentences(f"Done. {first} {second}") == [f"Done. {first}", second]
    assert _sentences(f"{first} Done. (ticket 12).") == [f"{first} Done.", "(ticket 12)."]


def test_a_turns_speaker_stays_with_its_later_sentences() -> None:
    content = (
        "## Session 19:42\n"
        "- Maya: You won't believe what happened since we last talked. "
        "I sold twelve mugs at the craft fair on Saturday morning.\n"
        "- Theo: Haha, no way!\n"
        "**Theo:** That's incredible, you're officially a professional potter now, I want one of them.\n"
        "- the plan: Ship the new kiln schedule on Friday after the review. "
        "Then we tell the others in the Monday meeting about it.\n"
        "- Maya: I'm taking the whole weekend off to celebrate with the family.\n"
    )
    out = spans(content, "## Session 19:42", 10)
    assert [(s.start_line, s.end_line, s.text.split("\n", 1)[1]) for s in out] == [
        (11, 11, "- Maya: You won't believe what happened since we last talked."),
        (11, 11, "Maya: I sold twelve mugs at the craft fair on Saturday morning."),  # the news is Maya's, said second
        (12, 12, "- Theo: Haha, no way!"),
        (13, 13, "**Theo:** That's incredible, you're officially a professional potter now, I want one of them."),
        # A label in lower case is no speaker: its later sentence stands alone, as in a journal.
        (14, 14, "- the plan: Ship the new kiln schedule on Friday after the review."),
        (14, 14, "Then we tell the others in the Monday meeting about it."),
        (15, 15, "- Maya: I'm taking the whole weekend off to celebrate with the family."),
    ]


def test_a_speaker_after_a_chat_logs_time_or_marks_stays_with_the_turn() -> None:
    """Chat logs put a time, a quote mark or a number before who speaks, and a note
    after the name: the later sentences of the turn are still that speaker's."""
    news = "I sold twelve mugs at the craft fair on Saturday morning."
    lines = [
        "[1:56 pm] Maya: You won't believe what happened since we last talked.",
        "- [2026-05-08 13:56] **Theo:** That is incredible news for the whole family.",
        "13:57 Maya: You won't believe what happened since we last talked.",
        "> Theo (laughing): That is incredible news for the whole family.",
        "3. Maya: You won't believe what happened since we last talked.",
        "Theo [13:58]: That is incredible news for the whole family.",
        "- [x] Buy clay: We need more of the speckled kind before the class.",
    ]
    content = "## Call 2026-05-08\n" + "\n".join(f"{line} {news}" for line in lines) + "\n"
    out = spans(content, "## Call 2026-05-08", 1)
    later = [s.text.split("\n", 1)[1] for s in out if s.text.endswith(news) and s.text.split("\n", 1)[1] != news]
    assert later == [f"{name}: {news}" for name in ("Maya", "Theo", "Maya", "Theo", "Maya", "Theo")]
    # A task's box is no time: its later sentence stands alone, as in a journal.
    assert sum(s.text.split("\n", 1)[1] == news for s in out) == 1


def index(ms: MemSearch):
    return asyncio.run(ms.index_with_report())


def recorded(ms: MemSearch) -> list[str]:
    """Every text the model is sent from now on (the real provider still embeds it)."""
    sent: list[str] = []
    inner = ms.provider.embed

    async def embed(texts: list[str]) -> list[list[float]]:
        sent.extend(texts)
        return await inner(texts)

    ms.provider.embed = embed  # type: ignore[method-assign]
    return sent


def spanned(ms: MemSearch) -> set[str]:
    """The stored chunks long enough to have spans (a short chunk has no span rows)."""
    ids = [cid for cid, _ in ms.store.iter_ids_by_source(None)]
    rows = ms.store.rows_for_ids(ids, ["content", "heading", "start_line"])
    out = {r["chunk_hash"] for r in rows if spans(r["content"], r["heading"], int(r["start_line"]))}
    assert out and len(out) < len(ids)  # the notes have both kinds
    return out


def dense_only(ms: MemSearch, query: str):
    vector = asyncio.run(ms.provider.embed_query(query))
    return ms.store.search(vector, "", top_k=3, explain=True)


@pytest.fixture
def notes(tmp_path: Path) -> Path:
    root = tmp_path / "notes"
    root.mkdir()
    (root / "2026-11-20.md").write_text(journal(), encoding="utf-8")
    (root / "2026-11-21.md").write_text(journal(fact_last=False).replace("2026-11-20", "2026-11-21"), encoding="utf-8")
    return root


def test_a_fact_in_the_last_bullet_is_found_by_its_span(notes: Path, tmp_path: Path, model_dir: Path) -> None:
    with MemSearch([str(notes)], embedding_model=str(model_dir), milvus_uri=str(tmp_path / "m.db")) as ms:
        report = index(ms)
        assert report.spans is not None and report.spans.embedded > 0
        hits = dense_only(ms, "which bucket does the aspen nightly export archive go to")
        best = hits[0]
        assert FACT in best["content"] and best["source"].endswith("2026-11-20.md")
        fact_line = journal().splitlines().index(f"- {FACT}") + 1
        span = best["explain"]["span"]
        assert span["start_line"] <= fact_line <= span["end_line"]
        fused = asyncio.run(ms.search("which bucket does the aspen nightly export archive go to", top_k=3))
        assert FACT in fused[0]["content"]


def test_a_long_chunk_is_embedded_once_as_its_spans(notes: Path, tmp_path: Path, model_dir: Path) -> None:
    """The model reads a long chunk once, in pieces: its spans are embedded, and
    its own vector (the one a memsearch 0.4.23 client searches) is their
    normalised mean; a short chunk is embedded whole, as before."""
    import numpy as np

    with MemSearch([str(notes)], embedding_model=str(model_dir), milvus_uri=str(tmp_path / "m.db")) as ms:
        sent = recorded(ms)
        report = index(ms)
        long_ids = spanned(ms)
        rows = ms.store.rows_for_ids(sorted(long_ids), ["content", "heading", "start_line", "embedding"])
        wholes = {r["content"] for r in rows}
        assert not any(t in wholes or t.startswith("### 10:00") for t in sent)  # no long chunk sent whole
        assert len(sent) == len(set(sent))  # the second file's identical lines are embedded once
        assert report.spans is not None and report.spans.chunks == len(long_ids)
        span_rows = [r for page in ms.store.spans.iter_rows() for r in page if not r["span_id"].endswith(":0")]
        vectors = ms.store.spans.vectors_for([r["text_hash"] for r in span_rows], {r["source"] for r in span_rows})
        by_chunk: dict[str, list[list[float]]] = {}
        for r in span_rows:
            by_chunk.setdefault(r["chunk_hash"], []).append(vectors[r["text_hash"]])
        for r in rows:
            mean = np.mean(np.asarray(by_chunk[r["chunk_hash"]]), axis=0)
            # The spans are stored as int8 codes with a scale: within 2^-8 of a unit vector's largest component.
            assert np.allclose(np.asarray(r["embedding"]), mean / np.linalg.norm(mean), atol=3e-3)
        short = [
            c
            for c in ms.store.rows_for_ids([i for i, _ in ms.store.iter_ids_by_source(None)], ["chunk_hash", "content"])
            if c["chunk_hash"] not in long_ids
        ]
        assert short and all(any(t == embedding_text_of(c["content"]) for t in sent) for c in short)


def embedding_text_of(content: str) -> str:
    from memsearch_fast._core import clean_content_for_embedding

    return clean_content_for_embedding(content) or content


@pytest.mark.slow(reason="indexes with the real model and searches its span vectors")
def test_spans_follow_their_chunks(notes: Path, tmp_path: Path, model_dir: Path) -> None:
    with MemSearch([str(notes)], embedding_model=str(model_dir), milvus_uri=str(tmp_path / "m.db")) as ms:
        index(ms)
        spans_store = ms.store.spans

        def chunks_with_spans() -> set[str]:
            return spans_store.chunk_hashes()

        assert chunks_with_spans() == spanned(ms)

        def codes_of(source: str) -> list[tuple[int, int, bytes, float]]:
            return sorted(
                (int(r["start_line"]), int(r["end_line"]), c.tobytes(), float(sc))
                for rows, codes, scales in spans_store.iter_codes([source])
                for r, c, sc in zip(rows, codes, scales, strict=True)
            )

        before = codes_of(str(notes / "2026-11-20.md"))
        assert before

        # A rename: every span takes its old vector. The renamed chunks' rows are the
        # run's own (their vectors reused): the span pass is given them, not reading
        # them back from the store.
        (notes / "2026-11-20.md").rename(notes / "moved.md")
        asked: list[list[str]] = []
        read = ms.store.rows_for_ids

        def rows_for_ids(ids, fields):
            asked.append(list(fields))
            return read(ids, fields)

        ms.store.rows_for_ids = rows_for_ids  # type: ignore[method-assign]
        moved = index(ms)
        del ms.store.rows_for_ids
        assert moved.spans is not None and moved.spans.embedded == 0 and moved.spans.reused > 0
        assert asked and "heading" not in {f for fields in asked for f in fields}  # the donors' lookups only
        assert chunks_with_spans() == spanned(ms)
        after = codes_of(str(notes / "moved.md"))  # the same spans, their codes made again from the vectors
        assert [a[:2] for a in after] == [b[:2] for b in before]
        for a, b in zip(after, before, strict=True):
            x, y = (np.frombuffer(v[2], dtype=np.int8).astype(np.float32) for v in (a, b))
            assert float(x @ y) / float(np.linalg.norm(x) * np.linalg.norm(y)) > 0.99
        assert not any(
            src.endswith("2026-11-20.md") for page in spans_store.iter_rows() for src in (r["source"] for r in page)
        )

        # An edit of one bullet: only the spans whose text changed are embedded
        # (the others take their stored vectors).
        text = (notes / "moved.md").read_text(encoding="utf-8").replace("lunch", "dinner")
        text = text.replace("glacier-otter-7", "glacier-otter-8")
        (notes / "moved.md").write_text(text, encoding="utf-8")
        edited = index(ms)
        assert edited.spans is not None and 1 <= edited.spans.embedded <= 2
        assert chunks_with_spans() == spanned(ms)

        # A deleted file: its spans go with its chunks.
        (notes / "moved.md").unlink()
        index(ms)
        sources = {r["source"] for page in spans_store.iter_rows() for r in page}
        assert sources == {str(notes / "2026-11-21.md")}

        # A reset drops the spans too.
        assert ms.drop() is True
        assert not ms.store.spans.exists


def test_a_chunk_whose_spans_are_all_stored_is_reused_not_embedded(
    notes: Path, tmp_path: Path, model_dir: Path
) -> None:
    """Two bullets swapped: the chunk's text changed, so it is written anew, but every
    span's text has a stored vector; the model reads nothing, and the report says the
    chunk's vector was reused (their mean), not embedded."""
    with MemSearch([str(notes)], embedding_model=str(model_dir), milvus_uri=str(tmp_path / "m.db")) as ms:
        index(ms)
        sent = recorded(ms)
        path = notes / "2026-11-20.md"
        first, second = f"- {FILLER[0]}\n", f"- {FILLER[1]}\n"
        text = path.read_text(encoding="utf-8")
        assert first + second in text
        path.write_text(text.replace(first + second, second + first), encoding="utf-8")
        report = index(ms)
        assert sent == []
        assert report.changed == 1 and report.embedded == 0 and report.reused == 1
        assert report.spans is not None and report.spans.embedded == 0 and report.spans.reused > 0
        assert ms.store.spans.chunk_hashes() == spanned(ms)


@pytest.mark.slow(reason="indexes with the real model and searches its span vectors")
def test_a_collection_indexed_before_spans_gets_them_in_one_run(
    notes: Path, tmp_path: Path, model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = str(tmp_path / "m.db")
    monkeypatch.setenv("MEMSEARCH_SPANS", "0")
    with MemSearch([str(notes)], embedding_model=str(model_dir), milvus_uri=db) as ms:
        assert index(ms).spans is None
        assert not ms.store.spans.exists
        before = dense_only(ms, "which bucket does the aspen nightly export archive go to")
        assert "span" not in before[0]["explain"]  # searches as before: chunk vectors alone
    monkeypatch.delenv("MEMSEARCH_SPANS")
    with MemSearch([str(notes)], embedding_model=str(model_dir), milvus_uri=db) as ms:
        report = index(ms)
        assert report.manifest and report.changed == 0 and report.embedded == 0  # the files did not change
        assert report.spans is not None and report.spans.chunks == len(spanned(ms))
        assert ms.store.spans.chunk_hashes() == spanned(ms)


@pytest.mark.slow(reason="indexes with the real model and searches its span vectors")
def test_spans_a_killed_run_left_out_are_added_by_the_next(notes: Path, tmp_path: Path, model_dir: Path) -> None:
    """A run killed after its chunks and before their spans leaves no trusted manifest
    (it is withdrawn before the first write): the next run reconciles every chunk."""
    db = tmp_path / "m.db"
    with MemSearch([str(notes)], embedding_model=str(model_dir), milvus_uri=str(db)) as ms:
        index(ms)
        clean = sorted(r["span_id"] for page in ms.store.spans.iter_rows() for r in page)
        victim = sorted(spanned(ms))[0]
        ms.store.spans.delete_chunks([victim])  # as if killed before this chunk's spans
        Manifest.for_store(ms.uri, ms.collection).invalidate()
        orphan = {"chunk_hash": "f" * 16, "source": str(notes / "gone.md"), "start_line": 1, "end_line": 1}
        ms.store.spans.put(  # and the spans of a chunk that is gone
            [{**orphan, "span_id": "f" * 16 + ":1", "text_hash": "x", "embedding": [0.1] * ms.store.dimension}],
            [{**orphan, "span_id": "f" * 16 + ":0", "text_hash": "", "embedding": [0.2] * ms.store.dimension}],
        )
        repaired = index(ms)
        assert repaired.spans is not None and repaired.spans.removed == 1 and repaired.spans.chunks == 1
        assert sorted(r["span_id"] for page in ms.store.spans.iter_rows() for r in page) == clean


def test_a_chunk_only_bm25_found_is_fused_with_its_best_vector(
    notes: Path, tmp_path: Path, model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each list one deep: the fact's chunk is BM25's only hit and not the dense
    list's, so its dense score is computed among its own vectors (its chunk vector
    and its spans'): the best of them, as the model gives it, plus the bonus for
    the question's words in the lines that matched."""
    import numpy as np

    from memsearch_fast.store import fusion

    monkeypatch.setattr(fusion, "DEPTH", 1)
    with MemSearch([str(notes)], embedding_model=str(model_dir), milvus_uri=str(tmp_path / "m.db")) as ms:
        index(ms)
        query = asyncio.run(ms.provider.embed_query("a short entry about lunch"))
        assert not any(FACT in h["content"] for h in ms.store.search(query, "", top_k=2))  # not in the dense list
        fact = next(h for h in ms.store.search(query, "glacier-otter-7", top_k=2, explain=True) if FACT in h["content"])
        row = ms.store.rows_for_ids([fact["chunk_hash"]], ["content", "heading", "start_line", "embedding"])[0]
        texts = [s.text for s in spans(row["content"], row["heading"], int(row["start_line"]))]
        vectors = np.asarray([row["embedding"], *asyncio.run(ms.provider.embed(texts))], dtype=np.float32)
        q = np.asarray(query, dtype=np.float32)
        cosines = vectors @ q / np.linalg.norm(vectors, axis=1) / float(np.linalg.norm(q))
        from memsearch_fast.store.spans.words import WORD_BONUS

        # Plus the bonus for the question's word in the lines that gave the score: the whole
        # chunk (its own vector best) or the span that was best.
        share = fact["explain"]["words"]
        best = int(cosines.argmax())
        assert share == (1.0 if "glacier-otter-7" in [row["content"], *texts][best] else 0.0)
        # A span's score is its stored 6-bit code's: within a few thousandths of the cosine.
        assert fact["explain"]["dense_score"] == pytest.approx(float(cosines.max()) + WORD_BONUS * share, abs=4e-3)
        assert fact["explain"]["sparse_rank"] == 1
        assert ("span" in fact["explain"]) == (int(cosines.argmax()) > 0)


def test_the_questions_words_in_the_line_that_matched_tell_look_alikes_apart() -> None:
    from memsearch_fast.store.spans.words import WORD_BONUS, with_words

    content = "### 10:00\n- {p} invoices are generated on day {d} of each month.\n- Lunch with the team."
    rows = {
        "birch": {"content": content.format(p="birch", d=12), "start_line": 4},
        "aspen": {"content": content.format(p="aspen", d=20), "start_line": 40},
    }
    matched = {"birch": {"start_line": 5, "end_line": 5}, "aspen": {"start_line": 41, "end_line": 41}}
    ranked = [("birch", 0.61), ("aspen", 0.60)]  # the model cannot tell the projects apart
    boosted, share = with_words(ranked, matched, rows, "when do aspen customers receive their bill")
    assert [cid for cid, _ in boosted] == ["aspen", "birch"]
    assert share == {"aspen": 0.25, "birch": 0.0}  # aspen of: aspen, customers, receive, bill
    assert boosted[0][1] == pytest.approx(0.60 + WORD_BONUS * 0.25)
    # Only the lines that matched count: the project named on another line of the chunk does not.
    matched["aspen"] = {"start_line": 42, "end_line": 42}
    assert with_words(ranked, matched, rows, "when do aspen customers receive their bill")[1]["aspen"] == 0.0
    assert with_words(ranked, matched, rows, "the of and") == (ranked, {})  # no word that says something


def test_where_a_chunks_own_vector_matched_its_best_item_counts_not_the_whole_chunk() -> None:
    """A chunk whose own vector was best has no one line that matched: the words
    asked count in its item (with the heading) that holds most of them, so a chunk
    that names the project on one line and the component on another does not beat
    the fact that names both."""
    from memsearch_fast.store.spans.words import with_words

    question = "when was it decided to move the lotus thumbnail cache queue to another backend"
    rows = {
        "fact": {"content": "- Decided to move the lotus thumbnail cache queue to Temporal.", "heading": "### 10:00"},
        "scattered": {
            "content": "- Decided: aspen keeps Kafka for the feature flag.\n- The lotus freeze ends.\n"
            "- Another backend for the juniper thumbnail cache queue.",
            "heading": "### 11:00",
        },
        "headed": {"content": "- Moved to Temporal.", "heading": "## lotus thumbnail cache queue"},
    }
    boosted, share = with_words([("scattered", 0.83), ("fact", 0.80), ("headed", 0.50)], {}, rows, question)
    asked = 8  # decided, move, lotus, thumbnail, cache, queue, another, backend
    assert share == {"fact": 6 / asked, "scattered": 5 / asked, "headed": 4 / asked}
    assert boosted[0][0] == "fact"
    # An item is a bullet with its continuation lines, or a paragraph; anchors are no item.
    rows = {
        "wrapped": {
            "content": "<!-- session:s1 turn:t1 transcript:/t.jsonl -->\n- Decided to move the lotus\n"
            "  thumbnail cache queue to Temporal.\n- Lunch.",
            "heading": "### 10:00",
        },
        "prose": {"content": "We decided to move the lotus\nthumbnail cache queue.\n\nLunch.", "heading": ""},
    }
    assert with_words([("wrapped", 0.8), ("prose", 0.7)], {}, rows, question)[1] == {
        "wrapped": 6 / asked,
        "prose": 6 / asked,
    }
    # A span that matched counts with its chunk's heading where the heading has a word, as the
    # model read it; a journal entry's time is no word.
    spanned = {"content": "- Moved to another backend.\n- Lunch.", "start_line": 10}
    hit = {"start_line": 10, "end_line": 10}
    for heading, found in (("## lotus queue", 4), ("### 10:00", 2)):
        rows = {"s": {**spanned, "heading": heading}}
        assert with_words([("s", 0.5)], {"s": hit}, rows, question)[1] == {"s": found / asked}


@pytest.mark.slow(reason="indexes with the real model and searches its span vectors")
def test_explain_names_the_line_that_matched(notes: Path, tmp_path: Path, model_dir: Path, env: dict[str, str]) -> None:
    """``search --explain`` (text and ``-j``) says which lines gave a hit its dense score;
    ``index -j`` tells the span pass's progress."""
    import json

    from memsearch_fast.lite import broker
    from tests.helpers.cli import ok, run

    db = tmp_path / "cli.db"
    common = ["--milvus-uri", str(db), "-m", str(model_dir)]
    try:
        report = json.loads(ok(run(["index", str(notes), *common, "-j"], env)).stdout)
        assert report["spans"]["chunks"] > 0  # written with their chunks
        # A moved file's chunks take their stored vectors, and the span pass gives them
        # their spans after the chunks: it is told as it goes, in counts of its own.
        moved = notes / "sub" / "2026-11-20.md"
        moved.parent.mkdir()
        (notes / "2026-11-20.md").rename(moved)
        proc = ok(run(["index", str(notes), *common, "-j"], env))
        report = json.loads(proc.stdout)
        told = [json.loads(line) for line in proc.stderr.splitlines() if line.startswith('{"event":"progress"')]
        spanned = [line for line in told if "span_chunks" in line]
        assert report["spans"]["chunks"] > 0 and report["spans"]["embedded"] == 0 and spanned
        assert spanned[-1]["span_chunks_done"] == spanned[-1]["span_chunks"] >= report["spans"]["chunks"]
        query = "which bucket does the aspen nightly export archive go to"
        fact_line = journal().splitlines().index(f"- {FACT}") + 1
        hits = json.loads(ok(run(["search", query, "-j", "-k", "1", "--explain", *common], env)).stdout)
        assert hits[0]["source"] == str(moved)
        assert FACT in hits[0]["content"] and hits[0]["explain"]["span"]["start_line"] == fact_line, hits
        text = ok(run(["search", query, "-k", "1", "--explain", *common], env)).stdout
        why = next(line for line in text.splitlines() if line.startswith("Why:"))
        assert f"line {fact_line})" in why, why
    finally:
        broker.stop_server(str(db))


@pytest.mark.slow(reason="indexes with the real model and searches its span vectors")
def test_spans_are_stored_as_float16_and_a_float32_collection_made_before_still_works(
    notes: Path, tmp_path: Path, model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """New span collections (a server's; here Lite's, as before the span file) hold
    float16 vectors. One made before, with float32 vectors, is searched and written
    as it is: its vectors are not misread, and an edited chunk's new spans land in it."""
    import numpy as np
    from pymilvus import DataType

    monkeypatch.setenv("MEMSEARCH_SPAN_STORE", "collection")

    question = "which bucket does the aspen nightly export archive go to"
    db = str(tmp_path / "m.db")
    with MemSearch([str(notes)], embedding_model=str(model_dir), milvus_uri=db) as ms:
        index(ms)
        spans_store = ms.store.spans
        assert spans_store.half
        info = ms.store._call("describe", lambda c: c.describe_collection(spans_store.collection))
        assert [f["type"] for f in info["fields"] if f["name"] == "embedding"] == [DataType.FLOAT16_VECTOR]
        new = dense_only(ms, question)[0]
        rows = [r for page in spans_store._iterate("", [*FIELDS, "embedding"]) for r in page]
        vectors = [spans_store.read(r["embedding"]) for r in rows]

        def old_layout(c):  # the layout of the span collections made before float16
            schema = c.create_schema(enable_dynamic_field=False)
            schema.add_field(field_name="span_id", datatype=DataType.VARCHAR, max_length=80, is_primary=True)
            for name in ("chunk_hash", "source", "text_hash"):
                schema.add_field(field_name=name, datatype=DataType.VARCHAR, max_length=1024)
            schema.add_field(field_name="start_line", datatype=DataType.INT64)
            schema.add_field(field_name="end_line", datatype=DataType.INT64)
            schema.add_field(field_name="embedding", datatype=DataType.FLOAT_VECTOR, dim=len(vectors[0]))
            index_params = c.prepare_index_params()
            index_params.add_index(field_name="embedding", index_type="FLAT", metric_type="COSINE")
            c.create_collection(collection_name=spans_store.collection, schema=schema, index_params=index_params)
            c.insert(
                collection_name=spans_store.collection,
                data=[{**r, "embedding": v.tolist()} for r, v in zip(rows, vectors, strict=True)],
            )

        spans_store.drop()
        ms.store._call("create", old_layout)
    with MemSearch([str(notes)], embedding_model=str(model_dir), milvus_uri=db) as ms:
        assert not ms.store.spans.half
        # Its vectors read back as they were written (a misread vector is far from unit length),
        # and a chunk's best span among its own rows is the one the search found.
        held = [r for page in ms.store.spans.iter_vectors() for r in page]
        assert len(held) == len([r for r in rows if not r["span_id"].endswith(":0")])
        assert all(abs(float(np.linalg.norm(r["embedding"])) - 1.0) < 1e-2 for r in held)
        best = ms.store.spans.best_of(asyncio.run(ms.provider.embed_query(question)), [new["chunk_hash"]])
        assert best[new["chunk_hash"]]["start_line"] == new["explain"]["span"]["start_line"]
        old = dense_only(ms, question)[0]
        assert old["chunk_hash"] == new["chunk_hash"]
        assert old["explain"]["span"]["start_line"] == new["explain"]["span"]["start_line"]
        assert old["explain"]["span"]["score"] == pytest.approx(new["explain"]["span"]["score"], abs=1e-3)
        path = notes / "2026-11-20.md"
        path.write_text(path.read_text(encoding="utf-8").replace(FACT, FACT + " It runs at 02:00 UTC."), "utf-8")
        report = index(ms)
        assert report.changed == 1 and report.spans is not None and report.spans.chunks == 1
        assert not ms.store.spans.half and ms.store.spans.chunk_hashes() == spanned(ms)
        hit = dense_only(ms, question)[0]
        assert "02:00 UTC" in hit["content"] and "span" in hit["explain"]
        row = ms.store.rows_for_ids([hit["chunk_hash"]], ["content", "heading", "start_line"])[0]
        text = next(
            s.text
            for s in spans(row["content"], row["heading"], int(row["start_line"]))
            if s.start_line == hit["explain"]["span"]["start_line"]
        )
        assert "02:00 UTC" in text
        q, v = (np.asarray(x, np.float32) for x in asyncio.run(ms.provider.embed([question, text])))
        cosine = float(q @ v / np.linalg.norm(q) / np.linalg.norm(v))
        assert hit["explain"]["span"]["score"] == pytest.approx(cosine, abs=1e-4)  # float32, as written
        # Another process makes the collection anew (reset, then index: float16 now). This
        # long-lived instance read the old type; its searches still answer, not fail.
        with MemSearch([str(notes)], embedding_model=str(model_dir), milvus_uri=db) as other:
            assert other.drop()
            index(other)
            assert other.store.spans.half
        again = dense_only(ms, question)[0]
        assert ms.store.spans.half and again["chunk_hash"] == hit["chunk_hash"]
        assert again["explain"]["span"]["start_line"] == hit["explain"]["span"]["start_line"]
        assert again["explain"]["span"]["score"] == pytest.approx(cosine, abs=2e-3)  # float16 now
        best = ms.store.spans.best_of(asyncio.run(ms.provider.embed_query(question)), [hit["chunk_hash"]])
        assert best[hit["chunk_hash"]]["start_line"] == hit["explain"]["span"]["start_line"]


def test_a_line_in_every_entry_is_read_back_once_per_lookup(
    tmp_path: Path, model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A line said in every meeting ("Agreed, ship it on Friday.") has a span row per
    chunk; the lookup of stored span vectors in a span collection reads one of them
    with its vector, not all (Milvus Lite answers many rows with vectors slowly), and
    gives each text its stored vector."""
    monkeypatch.setenv("MEMSEARCH_SPAN_STORE", "collection")
    root = tmp_path / "notes"
    root.mkdir()
    said = "Agreed, ship it on Friday once the aspen dashboard is green."
    entries = [
        f"### 10:{i:02d}\n" + "\n".join(f"- {FILLER[(i + j) % len(FILLER)]} (item {i}.{j})" for j in range(5))
        for i in range(12)
    ]
    (root / "meetings.md").write_text("\n\n".join(e + f"\n- {said}" for e in entries) + "\n", encoding="utf-8")
    with MemSearch([str(root)], embedding_model=str(model_dir), milvus_uri=str(tmp_path / "m.db")) as ms:
        index(ms)
        store = ms.store.spans
        rows = [r for page in store.iter_rows() for r in page if not str(r["span_id"]).endswith(":0")]
        hashes = sorted({r["text_hash"] for r in rows})
        repeated = [h for h in hashes if sum(r["text_hash"] == h for r in rows) >= 10]
        assert repeated  # the line said in every meeting
        with_vectors: list[int] = []
        inner = store._query_in

        def counted(field: str, values: list[str], fields: list[str]):
            out = list(inner(field, values, fields))
            if "embedding" in fields:
                with_vectors.append(len(out))
            return iter(out)

        store._query_in = counted  # type: ignore[method-assign]
        vectors = store.vectors_for(hashes)
        assert sum(with_vectors) == len(hashes) == len(vectors)
        [row] = store._query_in("span_id", [rows[0]["span_id"]], ["embedding"])
        assert vectors[rows[0]["text_hash"]] == pytest.approx(store.read(row["embedding"]).tolist(), abs=1e-6)
