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
the turn carries the name (the speaker rule, below).

A short chunk (at most :data:`MIN_CHUNK_BYTES` of span text) needs no spans:
its own vector is not diluted, and spans would multiply the vectors stored.
Anchors (``<!-- session:… -->``) and heading lines are not span text.

The Rust core cuts them (``_core.cut_spans``: a batch of chunks in parallel,
without the GIL, each span with its text's content hash); the same rules in
Python are the oracle its tests compare it with (``tests/helpers/span_oracle.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from memsearch_fast import _core
from memsearch_fast.store.spans.columns import SpanBlock

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
#: three words, not lower case; after a quote mark, a list number or a chat log's time,
#: ``[1:56 pm] Maya:``, ``- 13:56 Maya:``, with a note after it, ``Maya (1:56 pm):``,
#: ``Maya [13:56]:``)
#: gives its later sentences the name too, which a turn's
#: second sentence would otherwise lack (the news in "You won't believe it. I sold twelve
#: mugs at the fair." is Maya's). On long two-person conversations (``benches/retrieval.py
#: --set conversation``) spans lost 7 points of hit@5 to no spans without it, and hold
#: with it (docs/retrieval.md, "Spans in conversations"). A sentence ends after one of
#: ``.!?。！？；;`` and white space (dropped), or after a CJK stop.


@dataclass(frozen=True, slots=True)
class Span:
    """Lines ``start_line``..``end_line`` (1-based, in the file) of a chunk, the
    text the model sees for them, and that text's content hash."""

    index: int
    start_line: int
    end_line: int
    text: str
    text_hash: str


#: A span as the core gives it: :class:`Span`'s fields.
SpanFields = tuple[int, int, int, str, str]


def cut(chunks: Sequence[tuple[str, str, int]], budget: int = BUDGET_BYTES) -> list[list[SpanFields]]:
    """The spans of each chunk ``(content, heading, start_line)``, as :class:`Span`'s
    fields; a chunk that is short or makes one span has none."""
    return _core.cut_spans(
        list(chunks), budget=budget, min_chunk=MIN_CHUNK_BYTES, min_sentence=MIN_SENTENCE_BYTES, first=FIRST
    )


def cut_columns(
    chunks: Sequence[tuple[str, str, int]], budget: int = BUDGET_BYTES
) -> tuple[list[SpanBlock], list[str], np.ndarray]:
    """:func:`cut` as a :class:`~memsearch_fast.store.spans.columns.SpanBlock` a chunk
    (empty: it has none), with the texts of all their spans in that order and
    their UTF-8 sizes: no object a span but its text and its text's hash."""
    counts, starts, ends, sizes, texts, hashes = _core.cut_spans_columns(
        list(chunks), budget=budget, min_chunk=MIN_CHUNK_BYTES, min_sentence=MIN_SENTENCE_BYTES, first=FIRST
    )
    a, b = np.frombuffer(starts, "<i4"), np.frombuffer(ends, "<i4")
    blocks: list[SpanBlock] = []
    at = 0
    for n in counts:
        blocks.append(SpanBlock(a[at : at + n], b[at : at + n], hashes[at : at + n], None, FIRST))
        at += n
    return blocks, texts, np.frombuffer(sizes, "<i4")


def spans(content: str, heading: str, start_line: int, budget: int = BUDGET_BYTES) -> list[Span]:
    """The spans of a chunk (its ``content``, ``heading`` and first line), in order;
    empty when the chunk is short or makes one span."""
    return [Span(*s) for s in cut([(content, heading, start_line)], budget)[0]]
