"""Where the package under test is installed, for subprocesses' ``PYTHONPATH``.

Not the source tree: a plain ``pip install .`` leaves ``python/memsearch_fast``
without its compiled ``_core``, so a subprocess pointed there fails to import.
"""

from __future__ import annotations

from pathlib import Path

import memsearch_fast

#: The folder holding the imported ``memsearch_fast`` (site-packages, or
#: ``python/`` in an editable install, where the extension is built in place).
PACKAGE_PARENT = str(Path(memsearch_fast.__file__).resolve().parents[1])
