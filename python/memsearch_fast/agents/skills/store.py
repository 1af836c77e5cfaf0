"""The candidate skill store: names, candidates, the pending-install summary, install.

Compatible with memsearch 0.4.23 both ways: the same place
(``<memsearch dir>/skill-candidates``), the same ``SKILL.md`` rendering (so
the same content hashes), the same ``meta.json`` fields, the same git history
(a commit per change, with a fixed committer identity). On top of it:

- every file is written to a temporary file beside it and renamed over the
  old one; store files are 0600 and store directories 0700 (installed skills
  get ordinary file modes: agents and teammates read them);
- a name given on the command line that is a path (``a/b``, ``../x``,
  ``/etc``) is refused, and no candidate or install directory that is a
  symlink is written through or read from, so nothing lands outside the store
  or the chosen destination;
- writers take an advisory lock on the store directory, so two captures or
  an install racing a capture do not lose each other's ``meta.json`` update;
- without ``git`` on PATH the store works the same, without history.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import stat
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from memsearch_fast import _os
from memsearch_fast.agents.skills import history
from memsearch_fast.errors import MemsearchError

STORE_DIR = "skill-candidates"
SKILL_FILE = "SKILL.md"
META_FILE = "meta.json"
HASH_PREFIX = "gitblob:"
#: Longest directory name a slug may become (NAME_MAX on common file systems).
MAX_SLUG = 255

_NOT_SLUG = re.compile(r"[^a-z0-9-]+")
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


class SkillError(MemsearchError, ValueError):
    """A skills operation cannot be done; the message is one line for the user."""


@dataclass
class Candidate:
    """A skill to write into the store (already validated and slugified)."""

    name: str
    description: str
    body: str
    occurrences: int | None = None
    sources: list[str] = field(default_factory=list)
    reason: str = ""


# -- names and places ----------------------------------------------------------------------


def resolve_roots(project_dir: str | Path | None = None, memsearch_dir: str | Path | None = None) -> tuple[Path, Path]:
    """(project root, memsearch directory), both resolved.

    The project is the current directory; the memsearch directory is
    ``$MEMSEARCH_DIR`` (relative to the project) or ``<project>/.memsearch``.
    """
    from memsearch_fast.config import environment

    project = Path(project_dir or os.getcwd()).expanduser().resolve()
    raw = memsearch_dir or environment.text("MEMSEARCH_DIR")
    if not raw:
        # The project's own folder came with its repository: the hooks' rules apply.
        from memsearch_fast.agents.project import Project, UnsafeProjectError, guard

        here = str(project / ".memsearch")
        try:
            checked = guard(Project(str(project), here, os.path.join(here, "memory"), ""))
        except UnsafeProjectError as exc:
            raise SkillError(str(exc)) from None
        return project, Path(checked.memsearch_dir)
    mem = Path(raw).expanduser()
    if not mem.is_absolute():
        mem = project / mem
    return project, mem.resolve()


def store_root(mem_root: Path) -> Path:
    return mem_root / STORE_DIR


def slugify(name: str) -> str:
    """Lowercase letters, digits and single dashes: ``"Run Tests!"`` → ``run-tests``."""
    slug = _NOT_SLUG.sub("-", name.strip().lower()).strip("-")
    return slug[:MAX_SLUG].rstrip("-") or "skill"


def check_name(name: str) -> str:
    """The slug of a name given on the command line; a path is refused."""
    text = name.strip()
    if "/" in text or "\\" in text or text in (".", ".."):
        raise SkillError(f"skill name {name!r} is a path; give a plain name such as 'run-tests'")
    return slugify(text)


def now() -> str:
    """UTC now as the store writes it: ``2026-01-02T03:04:05.678901Z``."""
    return datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")


def render_skill_md(name: str, description: str, body: str) -> str:
    """SKILL.md: the standard frontmatter fields only (the description JSON-quoted,
    which YAML reads as a double-quoted string), then the body."""
    return f"---\nname: {name}\ndescription: {json.dumps(description, ensure_ascii=False)}\n---\n\n{body.rstrip()}\n"


def skill_body(skill_md: str) -> str:
    """The body of a SKILL.md, without its frontmatter."""
    if skill_md.startswith("---"):
        parts = skill_md.split("---", 2)
        if len(parts) == 3:
            return parts[2].strip()
    return skill_md.strip()


def content_hash(data: bytes) -> str:
    """Git's blob id of *data*, prefixed: the store's content hash."""
    digest = hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()
    return HASH_PREFIX + digest


# -- files -----------------------------------------------------------------------------------


def read_regular(path: Path) -> bytes | None:
    """The bytes of the regular file *path*; ``None`` when it does not exist;
    :class:`SkillError` when it is a symlink or not a file."""
    try:
        fd = os.open(path, os.O_RDONLY | _O_NOFOLLOW | _O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise SkillError(f"{path} is a symlink; refusing to follow it") from None
        raise
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise SkillError(f"{path} is not a regular file")
        return f.read()


def _quiet_read(path: Path) -> bytes | None:
    """:func:`read_regular`, with anything unreadable as missing (for listings)."""
    try:
        return read_regular(path)
    except (SkillError, OSError):
        return None


def load_json_object(data: bytes | None) -> dict[str, Any] | None:
    """A JSON object from *data*, or ``None`` (missing, not JSON, not an object)."""
    if data is None:
        return None
    try:
        value = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    return value if isinstance(value, dict) else None


def dump_json(value: Any, *, sort_keys: bool = False) -> bytes:
    return (json.dumps(value, indent=2, ensure_ascii=False, sort_keys=sort_keys) + "\n").encode("utf-8")


def write_atomic(path: Path, data: bytes, mode: int = 0o600) -> None:
    """:func:`memsearch_fast._os.write_atomic` (a symlink at *path* is replaced, never written through)."""
    _os.write_atomic(path, data, mode=mode)


def make_private_dir(path: Path) -> None:
    """Create *path* (and missing parents) 0700; an existing directory is left as it is."""
    if path.is_dir():
        return
    make_private_dir(path.parent)
    with contextlib.suppress(FileExistsError):
        path.mkdir(mode=0o700)
    if not path.is_dir():
        raise SkillError(f"{path} exists and is not a directory")


def _candidate_dir(root: Path, slug: str) -> Path:
    path = root / slug
    if path.is_symlink():
        raise SkillError(f"candidate {path} is a symlink; a candidate must be a directory inside {root}")
    return path


# -- the store directory -------------------------------------------------------------------


def ensure_store(mem_root: Path) -> Path:
    """The store directory, created (0700, a git repository) when missing."""
    root = store_root(mem_root)
    make_private_dir(root)
    if not (root / ".git").exists():
        history.init(root)
    return root


@contextlib.contextmanager
def store_lock(root: Path) -> Iterator[None]:
    """An exclusive advisory lock on the store directory (no lock file: the
    directory itself is locked); a no-op where ``flock`` does not exist."""
    try:
        import fcntl
    except ImportError:  # Windows
        yield
        return
    fd = os.open(root, os.O_RDONLY | _O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


# -- reading ---------------------------------------------------------------------------------


def pending_reason(meta: dict[str, Any], current_hash: str) -> str:
    """``"new"``, ``"updated"`` or ``""``: whether the current SKILL.md differs from
    what was last installed, and whether anything was ever installed."""
    installed_hash = str(meta.get("installed_hash") or "")
    if not current_hash or installed_hash == current_hash:
        return ""
    if installed_hash or meta.get("status") == "installed" or meta.get("installed_paths"):
        return "updated"
    return "new"


def _with_pending(skill_dir: Path, meta: dict[str, Any]) -> dict[str, Any]:
    out = dict(meta)
    data = _quiet_read(skill_dir / SKILL_FILE)
    current = content_hash(data) if data is not None else ""
    if current:
        out["content_hash"] = current
    reason = pending_reason(out, current)
    out["pending_install"] = bool(reason)
    if reason:
        out["pending_reason"] = reason
    else:
        out.pop("pending_reason", None)
    return out


def list_candidates(mem_root: Path) -> list[dict[str, Any]]:
    """The ``meta.json`` of every candidate, by name, with ``content_hash``,
    ``pending_install`` and ``pending_reason`` from the current SKILL.md.

    Entries that are hidden, symlinks, or lack a readable ``meta.json`` object are skipped.
    """
    return [_with_pending(path, meta) for path, meta in _scan(mem_root)]


def _scan(mem_root: Path) -> list[tuple[Path, dict[str, Any]]]:
    root = store_root(mem_root)
    if not root.is_dir():
        return []
    out: list[tuple[Path, dict[str, Any]]] = []
    for child in sorted(root.iterdir()):
        if child.name.startswith(".") or child.is_symlink() or not child.is_dir():
            continue
        meta = load_json_object(_quiet_read(child / META_FILE))
        if meta is not None:
            out.append((child, meta))
    return out


def review_summary(mem_root: Path) -> dict[str, Any]:
    """What ``skills status -j`` prints: counts of candidates and of versions pending install."""
    candidates = list_candidates(mem_root)
    pending = [m for m in candidates if m.get("pending_install")]
    return {
        "root": str(store_root(mem_root)),
        "candidate_count": len(candidates),
        "pending_count": len(pending),
        "new_count": sum(1 for m in pending if m.get("pending_reason") == "new"),
        "updated_count": sum(1 for m in pending if m.get("pending_reason") == "updated"),
        "pending_names": [str(m.get("name", "")) for m in pending if m.get("name")],
    }


def format_hint(summary: dict[str, Any]) -> str:
    """The one-line startup hint, or ``""`` when nothing is pending (agent hooks print it as is)."""
    count = int(summary.get("pending_count") or 0)
    if count <= 0:
        return ""
    return (
        f"SKILLS: {count} candidate skill version(s) pending install - "
        "run the memory-to-skill skill to review and install."
    )


def format_list_line(meta: dict[str, Any]) -> str:
    """One line of ``skills list``: name, status, how often seen, whether an install is ready."""
    occurrences = meta.get("occurrences")
    seen = f", seen {occurrences}x" if isinstance(occurrences, int) else ""
    ready = {"new": ", install ready", "updated": ", update ready"}.get(str(meta.get("pending_reason")), "")
    return f"- {meta.get('name')} [{meta.get('status', 'candidate')}{seen}{ready}] - {meta.get('description', '')}"


def existing_candidates(mem_root: Path, limit: int) -> list[tuple[str, str, str]]:
    """(name, description, body) of every candidate, bodies cut to *limit* characters."""
    out: list[tuple[str, str, str]] = []
    for path, meta in _scan(mem_root):
        name = str(meta.get("name", ""))
        body = ""
        data = _quiet_read(path / SKILL_FILE)
        if data is not None:
            body = skill_body(data.decode("utf-8", "replace"))
            if len(body) > limit:
                body = body[:limit] + "\n…[truncated]"
        out.append((name, str(meta.get("description", "")), body))
    return out


# -- writing ---------------------------------------------------------------------------------


def write_candidate(root: Path, skill: Candidate) -> str:
    """Create or refresh one candidate (the caller holds :func:`store_lock`).

    ``"created"`` for a new one; ``"updated"`` when an existing one gets the new
    description and body, its sources merged and its occurrences raised. An
    installed candidate keeps evolving here: installing only takes a snapshot.
    """
    skill_dir = _candidate_dir(root, skill.name)
    meta_path = skill_dir / META_FILE
    rendered = render_skill_md(skill.name, skill.description, skill.body).encode("utf-8")
    stamp = now()
    old = read_regular(meta_path) if skill_dir.is_dir() else None
    if old is not None:
        meta = load_json_object(old) or {}
        # A damaged meta.json is repaired, not left nameless.
        meta.setdefault("name", skill.name)
        meta.setdefault("status", "candidate")
        old_sources = meta.get("sources")
        merged = {s for s in old_sources if isinstance(s, str)} if isinstance(old_sources, list) else set()
        meta["sources"] = sorted(merged | set(skill.sources))
        if skill.occurrences is not None:
            previous = meta.get("occurrences")
            previous = previous if isinstance(previous, int) and not isinstance(previous, bool) else 0
            meta["occurrences"] = max(previous, skill.occurrences)
        meta["description"] = skill.description
        meta["content_hash"] = content_hash(rendered)
        meta["updated_at"] = stamp
        write_atomic(skill_dir / SKILL_FILE, rendered)
        write_atomic(meta_path, dump_json(meta))
        return "updated"
    make_private_dir(skill_dir)
    write_atomic(skill_dir / SKILL_FILE, rendered)
    meta = {
        "name": skill.name,
        "status": "candidate",
        "description": skill.description,
        "content_hash": content_hash(rendered),
        "occurrences": skill.occurrences,
        "sources": list(skill.sources),
        "reason": skill.reason,
        "installed_paths": [],
        "created_at": stamp,
        "updated_at": stamp,
    }
    write_atomic(meta_path, dump_json(meta))
    return "created"


def add(
    name: str,
    description: str,
    body: str,
    *,
    project_dir: str | Path | None = None,
    memsearch_dir: str | Path | None = None,
) -> str:
    """Store an agent-drafted skill as a candidate (no LLM); returns its slug."""
    if not description.strip() or not body.strip():
        raise SkillError("a skill needs both a description and a body")
    slug = check_name(name)
    _project, mem_root = resolve_roots(project_dir, memsearch_dir)
    root = ensure_store(mem_root)
    with store_lock(root):
        outcome = write_candidate(root, Candidate(slug, description.strip(), body.strip(), sources=[], reason="manual"))
        verb = "new" if outcome == "created" else "revised"
        history.commit(root, f"skills add: {verb} candidate {slug} (manual capture)")
    return slug


def _destination(project: Path, raw: str, slug: str) -> Path:
    base = Path(raw).expanduser()
    if not base.is_absolute():
        base = project / base
    dest_dir = base / slug
    dest = dest_dir / SKILL_FILE
    for path in (dest_dir, dest):
        if path.is_symlink():
            raise SkillError(f"install destination {path} is a symlink; refusing to write through it")
    if dest_dir.exists() and not dest_dir.is_dir():
        raise SkillError(f"install destination {dest_dir} exists and is not a directory")
    if dest.exists() and not dest.is_file():
        raise SkillError(f"install destination {dest} exists and is not a file")
    return dest


def _public_mode(dest: Path) -> int:
    """The mode of the file being replaced, else 0644 less the umask."""
    with contextlib.suppress(OSError):
        return stat.S_IMODE(dest.stat().st_mode)
    mask = os.umask(0)
    os.umask(mask)
    return 0o644 & ~mask


def install(
    name: str,
    paths: Sequence[str],
    *,
    project_dir: str | Path | None = None,
    memsearch_dir: str | Path | None = None,
) -> list[str]:
    """Copy a candidate's current SKILL.md to ``<path>/<slug>/SKILL.md`` for each
    path (relative ones under the project) and record the install; returns the
    files written. Every destination is checked before any is written."""
    if not paths:
        raise SkillError("no install paths given; ask the user where to install the skill")
    slug = check_name(name)
    project, mem_root = resolve_roots(project_dir, memsearch_dir)
    root = store_root(mem_root)
    if not (root / slug).is_dir() or (root / slug).is_symlink():
        _candidate_dir(root, slug)  # a symlink: say so
        raise SkillError(f"no candidate skill named {name!r}")
    targets = [_destination(project, raw, slug) for raw in paths]
    with store_lock(root):
        skill_dir = _candidate_dir(root, slug)
        data = read_regular(skill_dir / SKILL_FILE)
        if data is None:
            raise SkillError(f"no candidate skill named {name!r}")
        for dest in targets:
            dest.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(dest, data, _public_mode(dest))
        installed = [str(dest) for dest in targets]
        meta_path = skill_dir / META_FILE
        old = read_regular(meta_path)
        if old is not None:
            meta = load_json_object(old) or {}
            digest = content_hash(data)
            previous = meta.get("installed_paths")
            known = {p for p in previous if isinstance(p, str)} if isinstance(previous, list) else set()
            stamp = now()
            meta["status"] = "installed"
            meta["content_hash"] = digest
            meta["installed_hash"] = digest
            meta["installed_paths"] = sorted(known | set(installed))
            meta["installed_at"] = stamp
            meta["updated_at"] = stamp
            write_atomic(meta_path, dump_json(meta))
            history.commit(root, f"skills install: {slug} into {len(installed)} place(s)")
    return installed
