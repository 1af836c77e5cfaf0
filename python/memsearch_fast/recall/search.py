"""What the recall verbs hand back: search hits with the agent tiers, and the JSON form.

One code path for every reader: ``memsearch search`` (text and ``-j``) and the
MCP server's ``memory_search`` both go through :func:`tiered_search` and
:func:`render_search`, so ``--min-score``, ``--budget`` and ``--digest`` mean
the same thing everywhere. Standard library only; the provider's tokenizer is
reached through the provider object itself.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from memsearch_fast.config.tuning import DEFAULT_TOP_K

if TYPE_CHECKING:
    from memsearch_fast.embeddings import EmbeddingProvider

#: Search hits longer than this are cut in text output (as memsearch 0.4.23 does).
SNIPPET_CHARS = 500

#: Name reported for the fallback token count (providers without a local tokenizer).
APPROX_TOKENIZER = "chars/4 (approximation)"

TokenCounter = Callable[[str], int]


class Searcher(Protocol):
    """What a tiered search needs of the API object (``api.MemSearch`` is one):
    its search, and its provider for counting tokens."""

    @property
    def provider(self) -> EmbeddingProvider: ...
    async def search(
        self,
        query: str,
        top_k: int = ...,
        source_prefix: str | os.PathLike[str] | None = None,
        *,
        explain: bool = False,
    ) -> list[dict[str, Any]]: ...


# -- JSON --------------------------------------------------------------------------------


def json_default(obj: Any) -> Any:
    """numpy scalars/arrays and other odd values from Milvus rows."""
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if hasattr(obj, "item"):
        return obj.item()
    return str(obj)


def to_json(data: Any) -> str:
    """The ``-j`` form: indented, non-ASCII kept as is."""
    return json.dumps(data, indent=2, ensure_ascii=False, default=json_default)


# -- search hits ---------------------------------------------------------------------------


def format_search(results: list[dict[str, Any]]) -> str:
    """Hits as memsearch 0.4.23 prints them; long ones end with its expand hint, and
    the others with one too (0.4.23 shows a hash only when it cuts the text, so its
    plain output gave no way to the next step of recall)."""
    if not results:
        return "No results found."
    return "\n".join(hit_block(i, r) for i, r in enumerate(results, 1))


def hit_block(i: int, r: dict[str, Any]) -> str:
    """Hit number *i* in text form."""
    out = ["", f"--- Result {i} (score: {float(r.get('score') or 0):.4f}) ---", f"Source: {r.get('source', '?')}"]
    if r.get("heading"):
        out.append(f"Heading: {r['heading']}")
    if r.get("explain"):
        out.append(explain_line(r["explain"]))
    content = r.get("content") or ""
    if len(content) > SNIPPET_CHARS:
        out.append(content[:SNIPPET_CHARS])
        out.append(f"  ... [truncated, run 'memsearch expand {r.get('chunk_hash', '')}' for full content]")
    else:
        out.append(content)
        out.append(f"  [run 'memsearch expand {r.get('chunk_hash', '')}' for the whole section]")
    return "\n".join(out)


def explain_line(e: dict[str, Any]) -> str:
    """``--explain``: where a hit stood in each retriever's list (and the lines of
    the span that gave its dense score), the fused score (and, when reranked, the
    cross-encoder's log-odds and the hit's fused rank)."""

    def part(name: str, key: str) -> str:
        rank, score = e.get(f"{key}_rank"), e.get(f"{key}_score")
        return f"{name} #{rank} ({score:.4f})" if rank is not None else f"{name} -"

    dense = part("dense", "dense")
    span = e.get("span")
    if span and e.get("dense_rank") is not None:  # the lines whose own vector gave the dense score
        a, b = span["start_line"], span["end_line"]
        dense = f"{dense[:-1]}, {f'line {a}' if a == b else f'lines {a}-{b}'})"
    if e.get("words"):  # the dense score includes the bonus for the question's words in those lines
        dense += f" words {float(e['words']):.0%}"
    line = f"Why: {dense} · {part('bm25', 'sparse')} · fused {float(e.get('fused') or 0):.4f}"
    if e.get("kept_at"):  # the dense list's first, moved up to that place (store/fusion.py)
        line += f" (dense #1 kept at #{e['kept_at']})"
    if e.get("rerank_score") is not None:
        line += f" · rerank {float(e['rerank_score']):.4f} (logit; fused #{e.get('fused_rank')})"
    return line


def plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


# -- output tiers (--budget, --digest, --min-score) -------------------------------------------


def approx_tokens(text: str) -> int:
    """Characters / 4, rounded up: the count for HTTP providers, whose tokenizer is remote."""
    return (len(text) + 3) // 4


def token_counter(provider: EmbeddingProvider) -> tuple[TokenCounter, str]:
    """A token count with the embedding model's own tokenizer, and its name.

    The provider's public ``count_tokens`` and ``tokenizer_name`` (the ONNX and
    local providers count with their model's tokenizer, the HTTP providers
    characters / 4); a provider without them falls back to
    :func:`approx_tokens`.
    """
    count = getattr(provider, "count_tokens", None)
    if not callable(count):
        return approx_tokens, APPROX_TOKENIZER
    return count, str(getattr(provider, "tokenizer_name", None) or APPROX_TOKENIZER)


def digest_line(r: dict[str, Any]) -> str:
    """``source:start-end heading score`` (the heading left out when empty)."""
    where = f"{r.get('source', '?')}:{r.get('start_line', 0)}-{r.get('end_line', 0)}"
    heading = " ".join(str(r.get("heading") or "").split())
    score = f"{float(r.get('score') or 0):.4f}"
    return f"{where} {heading} {score}" if heading else f"{where} {score}"


def digest_hit(r: dict[str, Any]) -> dict[str, Any]:
    """A hit without its content: what ``--digest -j`` carries (``rerank_score`` too when reranked)."""
    keys = ("source", "start_line", "end_line", "heading", "score", "chunk_hash")
    hit = {k: r.get(k) for k in keys}
    if "rerank_score" in r:
        hit["rerank_score"] = r["rerank_score"]
    return hit


def render_search(
    results: list[dict[str, Any]],
    *,
    json_output: bool = False,
    digest: bool = False,
    budget: int | None = None,
    min_score: float | None = None,
    count: TokenCounter = approx_tokens,
    tokenizer: str = APPROX_TOKENIZER,
) -> str:
    """Search output with the agent tiers applied: ``--min-score`` first, then
    ``--budget`` over the hits as printed (each hit counted alone, in its text,
    digest or JSON form; whole hits kept in rank order, the rest dropped).

    Without a tier flag ``-j`` prints the bare list of memsearch 0.4.23; with
    one it prints an object: ``results`` (that list, or digests), ``dropped``
    (hits cut by the budget), ``below_min_score``, ``budget``, ``tokens`` (used
    by ``results``) and ``tokenizer`` (null without ``--budget``).
    """
    if not (digest or budget is not None or min_score is not None):
        return to_json(results) if json_output else format_search(results)
    below = 0
    if min_score is not None:
        kept = [r for r in results if float(r.get("score") or 0) >= min_score]
        below, results = len(results) - len(kept), kept
    items: list[Any] = [digest_hit(r) for r in results] if digest and json_output else results
    if json_output:
        blocks = [to_json(item) for item in items]
    elif digest:
        blocks = [digest_line(r) for r in results]
    else:
        blocks = [hit_block(i, r) for i, r in enumerate(results, 1)]
    used, shown = 0, len(blocks)
    if budget is not None:
        for i, block in enumerate(blocks):
            n = count(block)
            if used + n > budget:
                shown = i
                break
            used += n
    dropped = len(blocks) - shown
    if json_output:
        return to_json(
            {
                "results": items[:shown],
                "dropped": dropped,
                "below_min_score": below,
                "budget": budget,
                "tokens": used if budget is not None else None,
                "tokenizer": tokenizer if budget is not None else None,
            }
        )
    lines = blocks[:shown] if shown else ["No results found."]
    if dropped:
        lines.append(
            f"[{plural(dropped, 'more hit')} dropped to stay within --budget {budget} tokens "
            f"({used} used, {tokenizer})]"
        )
    return "\n".join(lines)


async def tiered_search(
    ms: Searcher,
    query: str,
    *,
    top_k: int = DEFAULT_TOP_K,
    source_prefix: str | None = None,
    json_output: bool = False,
    digest: bool = False,
    budget: int | None = None,
    min_score: float | None = None,
    counter: Callable[[Any], tuple[TokenCounter, str]] = token_counter,
    explain: bool = False,
) -> str:
    """Search *ms* (a :class:`~memsearch_fast.api.MemSearch`) and render the hits
    with the tiers, as ``memsearch search`` prints them.

    With ``budget`` and hits, tokens are counted with ``counter(ms.provider)``
    (the provider is loaded already: the query was embedded with it); a
    long-lived caller may pass a counter that remembers its tokenizer copy.
    """
    results = await ms.search(query, top_k=top_k, source_prefix=source_prefix, explain=explain)
    count, tokenizer = counter(ms.provider) if budget is not None and results else (approx_tokens, APPROX_TOKENIZER)
    return render_search(
        results,
        json_output=json_output,
        digest=digest,
        budget=budget,
        min_score=min_score,
        count=count,
        tokenizer=tokenizer,
    )
