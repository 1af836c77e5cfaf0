"""Files another user plants beside a database in a directory others can write.

The record, the log and the locks beside a shared database, its manifest and
roots file: each is refused in one line that names the file, its owner and a
way on the user can take (remove it where they may; where a sticky directory
forbids it, keep the database in a directory of their own), never a raw
``[Errno 1]`` nor advice the user cannot follow.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from memsearch_fast.errors import another_users_file, describe
from tests.helpers.cli import make_env, one_line_error, run

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="a file of another user needs root to make")


def shared_dir(tmp_path: Path) -> Path:
    d = tmp_path / "shared"
    d.mkdir()
    d.chmod(0o1777)  # as /tmp: anyone may create files, only their owner remove them
    return d


def plant(path: Path, uid: int = 65534) -> Path:
    path.write_text("x", encoding="utf-8")
    os.chown(path, uid, uid)
    return path


@needs_root
def test_a_permission_error_on_another_users_file_names_it_its_owner_and_a_way_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    d = shared_dir(tmp_path)
    manifest = plant(d / "m.db.manifest-0123456789ab.json")
    denied = PermissionError(errno.EPERM, "Operation not permitted", str(manifest))
    line = describe(denied)
    assert line.startswith(f"{manifest} belongs to another user (uid 65534")
    assert line.endswith("remove it")  # root may
    # A user who is neither the file's nor the directory's owner may not remove it there.
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    line = describe(denied)
    assert "you cannot remove it from" in line and str(d) in line and "~/.memsearch/milvus.db" in line
    # A rename's target is the file in the way, not the writer's own temporary file.
    renamed = PermissionError(errno.EPERM, "Operation not permitted", str(d / ".tmp.1"), None, str(manifest))
    assert str(manifest) in (another_users_file(renamed) or "")
    # A file of this user, or an error that is no permission error, is left as it was.
    monkeypatch.setattr(os, "geteuid", lambda: 65534)
    assert another_users_file(denied) is None
    assert another_users_file(FileNotFoundError(errno.ENOENT, "No such file", str(manifest))) is None
    assert "\n" not in line and "Errno" not in line


@needs_root
@pytest.mark.parametrize("name", ["m.db.server.json", "m.db.server.log", "m.db.lock"])
def test_a_record_log_or_lock_another_user_planted_is_refused_in_one_line(tmp_path: Path, name: str) -> None:
    """Before, the record and the log were used as they were (or failed later on a
    raw ``[Errno 1]``), and the lock's refusal said "remove it" where its owner alone could."""
    d = shared_dir(tmp_path)
    planted = plant(d / name)
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "a.md").write_text("# Secret\n\nThe vault code is 4242.\n", encoding="utf-8")
    env = make_env(tmp_path / "home")
    line = one_line_error(run(["index", str(notes), "--milvus-uri", str(d / "m.db")], env, timeout=120), str(planted))
    assert "another user (uid 65534" in line and line.endswith("remove it")
    assert planted.read_text(encoding="utf-8") == "x" and planted.stat().st_uid == 65534
    assert not (d / "m.db").exists()  # nothing was written beside it
