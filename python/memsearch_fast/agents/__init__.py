"""The agent half: hooks that write an agent's memory and hand it back.

``memsearch hook <platform> <event>`` is the one implementation behind the
thin shims in ``hooks/`` (Claude Code, Codex, OpenCode, OpenClaw). Each
module has one role:

- :mod:`.project`: which project a hook runs for, its memory directory and
  its collection name (the reference's rule, so both tools share them);
- :mod:`.journal`: the daily logs: appending an entry under a lock, and the
  recent entries a new session starts with;
- :mod:`.turns`: the last turn (or the turns before a compaction) of an
  agent's session, as the text the summarizer reads;
- :mod:`.capture`: the background worker: summarize, append, index;
- :mod:`.watcher`: the project's watcher and the sessions that use it;
- :mod:`.hooks`: the events, their input deadline and their output;
- :mod:`.summarize`: a turn's text → notes, through the LLM the platform selects;
- :mod:`.compact`: stored chunks → one LLM summary → today's daily log;
- :mod:`.skills`: procedural memory: candidate skills distilled or captured
  from memory, installed by an explicit step.

The LLM protocols themselves live in :mod:`memsearch_fast.llm` (a floor below).

Hooks never fail the agent's session: errors go to ``.memsearch/hooks.log``.
"""
