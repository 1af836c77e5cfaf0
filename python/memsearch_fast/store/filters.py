"""Milvus filter expressions: every value placed in a filter is escaped here."""

from __future__ import annotations

import re

# Sorts after every valid string that starts with a given prefix (Milvus
# compares VARCHAR by UTF-8 bytes; U+10FFFF encodes as the largest sequence).
_MAX_CHAR = "\U0010ffff"


def escape_filter_value(value: str) -> str:
    """Escape ``value`` for use inside a double-quoted Milvus filter string.

    Backslash and double quote are escaped, and newline/CR become ``\\n``/``\\r``
    (a raw newline ends the literal). Other characters, including tabs and
    non-ASCII text, pass through unchanged: several engines reject ``\\uXXXX``
    escapes. Milvus Lite 2.5 cannot match a value containing a newline at all;
    the store's read paths handle such values with a prefix range plus an exact
    check in Python (see :meth:`MilvusStore._in_filter`). LIKE wildcards are
    never needed: prefix filters use a range instead of ``like``.
    """
    if not isinstance(value, str):
        raise TypeError(f"filter values must be str, not {type(value).__name__}")
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r")


def quote_filter_value(value: str) -> str:
    """Return ``value`` as a double-quoted, escaped filter literal."""
    return '"' + escape_filter_value(value) + '"'


def in_filter(field: str, values: list[str]) -> str:
    """``field in [...]`` with every value escaped."""
    return f"{field} in [{', '.join(quote_filter_value(v) for v in values)}]"


def all_of(*parts: str) -> str:
    """The filters in *parts* that are not empty, joined with ``and``."""
    kept = [p for p in parts if p]
    return " and ".join(f"({p})" for p in kept) if len(kept) > 1 else "".join(kept)


def prefix_filter(field: str, prefix: str) -> str:
    """Filter for ``field`` starting with ``prefix``, free of LIKE wildcards.

    ``%`` and ``_`` in file names would be wildcards in ``like``, and engines
    disagree on escaping them, so a string range is used. A prefix holding a
    newline is cut before it (the caller re-checks with ``startswith``).
    """
    head = re.split(r"[\r\n]", prefix, maxsplit=1)[0]
    if not head:
        return ""
    return f"({field} >= {quote_filter_value(head)} and {field} < {quote_filter_value(head + _MAX_CHAR)})"
