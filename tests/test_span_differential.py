"""The Rust span cutter (``_core.cut_spans``) against the Python rules it
replaced (``tests/helpers/span_oracle.py``): the same spans, lines and texts
on the benchmarks' journals, conversations and docs, on random text built of
the characters the rules look at, and for every assigned character where a
character class decides (white space, a speaker's label, a list marker)."""

from __future__ import annotations

import random
import unicodedata
from pathlib import Path

from memsearch_fast._core import chunk_markdown, content_hash
from memsearch_fast.index.spans import cut
from tests.helpers import span_oracle
from tests.helpers.corpus import write_corpus

#: Characters past Python's Unicode database are left out: there the two
#: tables may differ (a letter Python does not know yet), and nowhere else.
#: Of the 127,000 other letters (CJK ideographs, Hangul syllables: one class
#: each) a sample is enough; every other assigned character is tried.
_ASSIGNED = [c for c in map(chr, range(0x110000)) if unicodedata.category(c) not in ("Cn", "Cs", "Co") and c != "\n"]
CHARACTERS = [c for c in _ASSIGNED if unicodedata.category(c) != "Lo"] + random.Random(1).sample(
    [c for c in _ASSIGNED if unicodedata.category(c) == "Lo"], 3000
)
#: Their case changed after Unicode 14 (Python 3.11's database): a label they
#: open counts as lower case by one table and not by the other.
CASE_CHANGED = {"\u0295", "\u10fc", "\ua7f2", "\ua7f3", "\ua7f4", "\uab69"}
PAD = "- a line of its own, long enough that the chunk is cut into spans of its lines. " * 4


def same(chunks: list[tuple[str, str, int]], budget: int = 0) -> int:
    """Asserts the core cuts *chunks* as the oracle does; returns the spans."""
    got = cut(chunks, budget)
    n = 0
    for (content, heading, start), mine in zip(chunks, got, strict=True):
        assert [s[:4] for s in mine] == span_oracle.spans(content, heading, start, budget), (content, heading)
        assert all(s[4] == content_hash(s[3]) for s in mine)
        n += len(mine)
    return n


def test_the_benchmarks_corpora_are_cut_alike(tmp_path: Path) -> None:
    from benches import agent_corpus, conversation_corpus, dialogue_corpus

    agent_corpus.build(tmp_path / "journals", 0.3, 20, seed=3)
    conversation_corpus.build(tmp_path / "conversations", 0.3, seed=4)
    dialogue_corpus.build(tmp_path / "dialogue", 0.2, 20, seed=5)
    write_corpus(tmp_path / "docs", total_bytes=300_000, seed=6)
    chunks = [
        (c.content, c.heading, c.start_line)
        for path in sorted(tmp_path.rglob("*.md"))
        for c in chunk_markdown(path.read_text(encoding="utf-8"), str(path), max_chunk_size=1500, overlap_lines=2)
    ]
    assert len(chunks) > 1000
    assert same(chunks) > 3 * len(chunks)  # most chunks are long enough to be cut
    assert same(chunks, budget=200) > len(chunks)


#: What the rules look at: white space of every kind, stops (CJK ones too),
#: list markers, digits of other scripts, speakers' labels, bold, comments.
PIECES = [
    " ",
    "  ",
    "\t",
    "\u00a0",
    "\u3000",
    "\x1c",
    "\x85",
    "\u2028",
    "\r",
    "\n",
    "\n",
    "\n  ",
    "\n\t",
    "\n- ",
    "\n* ",
    "\n12. ",
    "\n٣) ",
    "\n# ",
    "\n<!-- a -->",
    ".",
    ". ",
    "! ",
    "? ",
    "; ",
    "。",
    "！",
    "；",
    "…",
    "Maya: ",
    "- Theo: ",
    "**Ana María:** ",
    "the plan: ",
    "²nd: ",
    "Ⅻ: ",
    "ǅemal: ",
    "ªb: ",
    "_x: ",
    "Dr. Lee: ",
    "'quote': ",
    "[1:56 pm] Caroline: ",
    "- [13:56] ",
    "13:56 ",
    "(9:05 a.m.) ",
    "\n> ",
    ">",
    "[",
    "]",
    "(",
    ")",
    " (to Maya)",
    " [13:56]",
    ":",
    "١٢:٣٠ ",
    "中文",
    "word",
    "another",
    "sentence",
    "é",
    "e\u0301",
    "x" * 45,
    "0",
    "9",
    "-",
    "*",
    "**",
    "<!--",
    "-->",
]


def test_random_text_of_the_characters_the_rules_read_is_cut_alike() -> None:
    rng = random.Random(7)
    chunks = []
    for _ in range(3000):
        text = "".join(rng.choice(PIECES) for _ in range(rng.randint(20, 200)))
        heading = rng.choice(["", "## Notes", "### 10:00", " \u00a0", "²", "Ⅻ", "_", "## 中文"])
        chunks.append((text, heading, rng.randint(0, 50)))
    same(chunks)
    same(chunks, budget=rng.choice([1, 40, 120]))


def test_every_character_is_classed_alike() -> None:
    """One chunk per character in each place a class decides: as white space
    around a line, first in a speaker's label, inside one, as a list marker's
    digit and where a sentence's stop is followed by it."""
    second = "And this is the second sentence of the turn, long enough to stand."
    chunks = []
    for c in CHARACTERS:
        if c in CASE_CHANGED:
            chunks.append((f"- Ma{c}ya: The first sentence of the turn is long enough here. {second}\n{PAD}", "", 1))
            continue
        chunks += [
            (f"{c}Maya said that she would come along tomorrow.{c}\n  {c}more{c}\n{PAD}", c, 1),
            (f"- {c}aya: The first sentence of the turn is long enough here. {second}\n{PAD}", "", 1),
            (f"- Ma{c}ya: The first sentence of the turn is long enough here. {second}\n{PAD}", "", 1),
            (f"- item\n {c}. continued or a list item of its own\n{PAD}", "", 1),
            (f"The first sentence of the line is long enough.{c}{second}\n{PAD}", "", 1),
        ]
    same(chunks)
