"""The live index: ``memsearch watch`` and :meth:`MemSearch.watch`.

:mod:`.run` turns file events into debounced index runs through the ordinary
pipeline; :mod:`.lock` keeps one watcher per database and root set.
"""
