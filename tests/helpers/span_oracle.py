"""The span rules in Python: the oracle the Rust cutter (``_core.cut_spans``,
behind :func:`memsearch_fast.index.spans.spans`) is compared with. It was the
index run's cutter until the Rust one took its place; the rules are documented
in :mod:`memsearch_fast.index.spans`."""

from __future__ import annotations

import re

from memsearch_fast.index.spans import FIRST, MIN_CHUNK_BYTES, MIN_SENTENCE_BYTES
from memsearch_fast.store.spans.words import LIST_ITEM, has_word, no_text


def utf8_size(text: str) -> int:
    """UTF-8 bytes of *text* (most are ASCII: no encoding then)."""
    return len(text) if text.isascii() else len(text.encode())


#: A chat log's time before who speaks (``[1:56 pm]``, a bracket with a digit; ``13:56``, ``(1:56 pm)``).
_STAMP = r"(?:\[[^\]\n]{0,40}\d[^\]\n]{0,40}\]|\(?\d{1,2}:\d{2}(?::\d{2})?(?:\s?[AaPp]\.?[Mm]\.?)?\)?)"
#: Who speaks (a label of one to three words, not lower case), after a quote mark, a list
#: marker or a time, with a note in brackets after it.
SPEAKER = re.compile(
    r"^(?:>+\s*)?(?:(?:[-*+]|\d{1,9}[.)])\s+)?(?:" + _STAMP + r"\s+)?"
    r"(?:\*\*)?([^\W\d_][\w'.-]*(?: [^\W\d_][\w'.-]*){0,2})(?:\*\*)?"
    r"(?:\s?(?:\([^()\n]{1,40}\)|\[[^\[\]\n]{1,40}\]))?(?:\*\*)?:(?:\*\*)?\s"
)
#: A sentence ends after one of these followed by white space (dropped), or after a CJK one.
_SENTENCE_END = re.compile(r"[.!?。！？；;]\s+|[。！？；]")


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


def spans(content: str, heading: str, start_line: int, budget: int = 0) -> list[tuple[int, int, int, str]]:
    """The spans of a chunk (its ``content``, ``heading`` and first line), in order;
    empty when the chunk is short or makes one span."""
    units = _units(content.split("\n"), start_line)
    if sum(utf8_size(text) + 1 for _, _, text in units) <= MIN_CHUNK_BYTES:
        return []
    prefix = f"{heading.strip()}\n" if has_word(heading) else ""
    if budget <= 0:  # the default: a span a sentence
        if len(units) < 2:
            return []
        return [(FIRST + i, a, b, prefix + text) for i, (a, b, text) in enumerate(units)]
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
    return [(FIRST + i, g[0][0], g[-1][1], prefix + "\n".join(text for _, _, text in g)) for i, g in enumerate(groups)]
