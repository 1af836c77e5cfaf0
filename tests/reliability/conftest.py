"""Fixtures shared by the reliability tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from memsearch_fast.lite import settings as lite_settings
from tests.helpers.harness import stop_servers


@pytest.fixture
def work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A temp directory for databases, in the default (shared server) mode; its servers stopped after."""
    monkeypatch.delenv(lite_settings.ENV_MODE, raising=False)
    yield tmp_path
    stop_servers(tmp_path)
