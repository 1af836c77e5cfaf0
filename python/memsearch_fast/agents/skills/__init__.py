"""Procedural memory: candidate skills distilled or captured from memory,
installed into agent skill directories by an explicit step.

The candidate store is where memsearch 0.4.23 keeps it, with the same layout,
so either tool sees the other's candidates::

    <project>/.memsearch/skill-candidates/      ($MEMSEARCH_DIR replaces .memsearch)
        .git/                                   one commit per change (history, revert)
        <slug>/SKILL.md                         standard frontmatter (name, description) + body
        <slug>/meta.json                        status, hashes, sources, install record

- :mod:`.store`: names, reading and listing candidates, the pending-install
  summary and hint, writing candidates (``add``) and installing them;
- :mod:`.history`: the store's git history (one commit per change);
- :mod:`.distill`: ``skills distill``: recent journals → the configured LLM →
  candidates, when the journals changed and the task is due.

Standard library only (plus :mod:`memsearch_fast.llm` for distill), so the
commands start fast. The built-in distill prompt is
``agents/prompts/memory_to_skill.txt``; routing is :mod:`memsearch_fast.agents.routing`.
"""
