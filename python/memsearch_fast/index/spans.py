"""Spans: the small pieces of a chunk that get vectors of their own.

A chunk's vector is one mean over all its lines, and the model reads only
its first 256 tokens, so a fact that is one bullet of an entry of twelve is
diluted, or not seen at all. Each sentence of a chunk (a bullet's, with its
continuation lines, or a paragraph's) is therefore a span, prefixed with the
chunk's heading where it has a word, and embedded on its own; neighbours may be grouped up to
:data:`BUDGET_BYTES`. Search ranks a chunk by its best vector (the chunk's
own or one of its spans') and still returns the chunk: small to find, big
to read.

A conversation's turn (``Maya: …``) keeps its speaker: a later sentence of
the turn carries the name (:data:`SPEAKER`).

A short chunk (at most :data:`MIN_CHUNK_BYTES` of span text) needs no spans:
its own vector is not diluted, and spans would multiply the vectors stored.
Anchors (``<!-- session:… -->``) and heading lines are not span text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from memsearch_fast.store.spans.words import LIST_ITEM, has_word, no_text

#: Lines are grouped into one span while they fit in this many UTF-8 bytes; 0: every line
#: is a span of its own (on agent journals, single lines ranked best: docs/retrieval.md).
BUDGET_BYTES = 0
#: A chunk whose lines hold at most this many UTF-8 bytes (about 80 tokens) keeps
#: its own vector alone.
MIN_CHUNK_BYTES = 320
#: A sentence shorter than this (UTF-8 bytes) is no span of its own: it joins its neighbour.
MIN_SENTENCE_BYTES = 40
#: The first span index of a chunk's spans; index 0 is the chunk's own vector.
FIRST = 1

#: A line that opens with who speaks (``Maya: …``, ``- **Maya:** …``; a label of one to
#: three words, not lower case): its later sentences carry the name too, which a turn's
#: second sentence would otherwise lack (the news in "You won't believe it. I sold twelve
#: mugs at the fair." is Maya's). On long two-person conversations (``benches/retrieval.py
#: --set conversation``) spans lost 7 points of hit@5 to no spans without it, and hold
#: with it (docs/retrieval.md, "Spans in conversations").
SPEAKER = re.compile(r"^(?:[-*+]\s+)?(?:\*\*)?([^\W\d_][\w'.-]*(?: [^\W\d_][\w'.-]*){0,2})(?:\*\*)?:(?:\*\*)?\s")
#: A sentence ends after one of these followed by white space (dropped), or after a CJK one.
_SENTENCE_END = re.compile(r"[.!?。！？；;]\s+|[。！？；]")


def utf8_size(text: str) -> int:
    """UTF-8 bytes of *text* (most are ASCII: no encoding then)."""
    return len(text) if text.isascii() else len(text.encode())


def _split(text: str) -> list[str]:
    """*text* cut after each sentence's end (a scan for the ends: a look-behind at every
    character cost a third of the span cutting)."""
    parts: list[str] = []
    start = 0
    for m in _SENTENCE_END.finditer(text):
        parts.append(text[start : m.start() + 1])
        start = m.end()
    parts.append(text[start:])
    return parts


@dataclass(frozen=True, slots=True)
class Span:
    """Lines ``start_line``..``end_line`` (1-based, in the file) of a chunk, and
    the text the model sees for them."""

    index: int
    start_line: int
    end_line: int
    text: str


def _units(lines: list[str], first_line: int) -> list[tuple[int, int, str]]:
    """(start, end, text) of each sentence of each list item or paragraph line."""
    units: list[tuple[int, int, str]] = []
    for offset, raw in enumerate(lines):
        line = raw.strip()
        number = first_line + offset
        if no_text(line):
            continue
        if units and raw[:1] in (" ", "\t") and not LIST_ITEM.match(raw):
            start, _, text = units[-1]  # a continuation line belongs to the item above
            units[-1] = (start, number, f"{text} {line}")
            continue
        units.append((number, number, line))
    out: list[tuple[int, int, str]] = []
    for start, end, text in units:
        said = SPEAKER.match(text)
        label = f"{said.group(1)}: " if said and not said.group(1)[0].islower() else ""
        out.extend((start, end, s if i == 0 else label + s) for i, s in enumerate(_sentences(text)))
    return out


def _sentences(text: str) -> list[str]:
    """The sentences of one item or line; one shorter than :data:`MIN_SENTENCE_BYTES` ("Done.",
    "(ticket 12).") joins its neighbour, the one before it (the first: the one after it). A
    sentence takes in one such neighbour at most, so a run of short sentences makes pairs."""
    out: list[str] = []
    joined: list[bool] = []
    for part in (s for s in _split(text) if s.strip()):
        short = utf8_size(part) < MIN_SENTENCE_BYTES or (out and utf8_size(out[-1]) < MIN_SENTENCE_BYTES)
        if out and short and not joined[-1]:
            out[-1] = f"{out[-1]} {part}"
            joined[-1] = True
        else:
            out.append(part)
            joined.append(False)
    return out


def spans(content: str, heading: str, start_line: int, budget: int = BUDGET_BYTES) -> list[Span]:
    """The spans of a chunk (its ``content``, ``heading`` and first line), in order;
    empty when the chunk is short or makes one span."""
    units = _units(content.split("\n"), start_line)
    if sum(utf8_size(text) + 1 for _, _, text in units) <= MIN_CHUNK_BYTES:
        return []
    prefix = f"{heading.strip()}\n" if has_word(heading) else ""
    if budget <= 0:  # the default: a span a sentence
        if len(units) < 2:
            return []
        return [Span(FIRST + i, a, b, prefix + text) for i, (a, b, text) in enumerate(units)]
    groups: list[list[tuple[int, int, str]]] = []
    size = 0
    for unit in units:
        n = utf8_size(unit[2])
        if groups and size + n + 1 <= budget:
            groups[-1].append(unit)
            size += n + 1
        else:
            groups.append([unit])
            size = n
    if len(groups) < 2:
        return []
    return [
        Span(FIRST + i, g[0][0], g[-1][1], prefix + "\n".join(text for _, _, text in g)) for i, g in enumerate(groups)
    ]
