"""The index pipeline, one module per stage: scan → chunk → dedup → embed → upsert (+ flush).

:mod:`memsearch_fast.pipeline.run` wires the stages together; data flows one
way and no stage imports a later one.
"""

from memsearch_fast.pipeline.run import IndexReport, NullProgress, Progress, run_index

__all__ = ["IndexReport", "NullProgress", "Progress", "run_index"]
