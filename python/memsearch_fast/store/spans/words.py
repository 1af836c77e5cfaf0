"""The question's words in the lines that matched: what tells a fact from its
look-alikes when the model scores them alike (docs/retrieval.md, "span words").
The line rules here (what a list item is, which lines hold no text) are also
the ones spans are cut by (:mod:`memsearch_fast.index.spans`).
"""

from __future__ import annotations

import re
from typing import Any

#: The dense score's bonus for the share of the question's words found in the lines
#: that gave a chunk its score (docs/retrieval.md, "span words").
WORD_BONUS = 0.3
_WORD = re.compile(r"[0-9a-z](?:[0-9a-z_.-]*[0-9a-z])?|[\u3400-\u9fff]")
_STOP = frozenset(
    "a an the of to in on at for by with from and or is are was were be been it its this that these those "
    "what which who whom whose when where why how did do does has have had we our you your they their he she "
    "his her them i me my not no yes as so than then there here after before about into over under up down "
    "can could would should will shall may might must any all some each every much many more most".split()
)


#: A markdown list item's first line (its continuation lines are indented).
LIST_ITEM = re.compile(r"^\s{0,3}(?:[-*+]|\d{1,9}[.)])\s")
_LETTER = re.compile(r"[^\W\d_]")


def no_text(line: str) -> bool:
    """A stripped line that holds no text to match: blank, a heading, or a comment
    (the plugins' session anchors)."""
    return not line or line.startswith("#") or (line.startswith("<!--") and line.endswith("-->"))


def has_word(heading: str) -> bool:
    """Whether *heading* says something (a letter in it): a journal entry's
    ``### 14:32`` or a dated heading does not, and leads no span."""
    return bool(_LETTER.search(heading))


def words(text: str) -> set[str]:
    """The words of *text* that say something: lowercased, stop words left out,
    each CJK character a word."""
    return {w for w in _WORD.findall(text.lower()) if w not in _STOP}


def span_text(row: dict[str, Any], hit: dict[str, Any]) -> str:
    """The lines of *row* (a chunk with ``content`` and ``start_line``) that *hit*
    (its best span) covers."""
    content = str(row.get("content") or "")
    first = int(row.get("start_line") or 0)
    lines = content.split("\n")
    return "\n".join(lines[max(0, int(hit["start_line"]) - first) : int(hit["end_line"]) - first + 1])


def with_words(
    ranked: list[tuple[str, float]],
    matched: dict[str, dict[str, Any]],
    rows: dict[str, dict[str, Any]],
    question: str,
    known: dict[str, float] | None = None,
) -> tuple[list[tuple[str, float]], dict[str, float]]:
    """The dense list with each chunk's score raised by :data:`WORD_BONUS` times the
    share of the question's words found in the lines that gave it its score (its
    best span, or its best item), best first, and each chunk's share (those in
    *known* already counted, :func:`shares`).

    The model scores a fact and its look-alikes (the same sentence about another
    project, with other numbers) nearly alike; BM25 sees the words, but over the
    whole chunk, where a project's name is in every entry. The question's own
    words in the very line that matched tell the fact from its look-alikes.
    """
    asked = words(question)
    if not asked:
        return ranked, {}
    known = known or {}
    share = {
        cid: known[cid] if cid in known else _share(asked, rows[cid], matched.get(cid))
        for cid, _ in ranked
        if cid in rows
    }
    out = [(cid, score + WORD_BONUS * share.get(cid, 0.0)) for cid, score in ranked]
    return sorted(out, key=lambda kv: -kv[1]), share


def shares(
    ranked: list[tuple[str, float]], matched: dict[str, dict[str, Any]], rows: dict[str, dict[str, Any]], question: str
) -> dict[str, float]:
    """The shares :func:`with_words` gives the chunks of *ranked* that *rows* holds:
    counted while the engine is still asked for something else (a chunk's share
    depends on its row and its span alone)."""
    asked = words(question)
    if not asked:
        return {}
    return {cid: _share(asked, rows[cid], matched.get(cid)) for cid, _ in ranked if cid in rows}


def _share(asked: set[str], row: dict[str, Any], hit: dict[str, Any] | None) -> float:
    """The share of *asked* in the span that matched, or, where the chunk's own
    vector was best, in its item (a list item with its continuation lines, or a
    paragraph) that holds most of them: over a whole chunk, the words of a
    look-alike's item and its neighbours' add up. A heading with a word counts
    with either, as it leads each span the model read."""
    heading = str(row.get("heading") or "")
    titled = words(heading) if has_word(heading) else set()
    if hit is not None:
        return len(asked & (titled | words(span_text(row, hit)))) / len(asked)
    return max(len(asked & (titled | words(item))) for item in _items(str(row.get("content") or ""))) / len(asked)


def _items(content: str) -> list[str]:
    """The list items (each with its continuation lines) and paragraphs of
    *content*; headings and comment lines (session anchors) left out."""
    items: list[str] = []
    open_item = False  # the item above takes the next line unless a new item starts
    for raw in content.split("\n"):
        line = raw.strip()
        if no_text(line):
            open_item = False
            continue
        if open_item and not LIST_ITEM.match(raw):
            items[-1] += " " + line
        else:
            items.append(line)
        open_item = True
    return items or [""]
