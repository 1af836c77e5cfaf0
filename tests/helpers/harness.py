"""What the reliability tests (and ``benches/reliability_long.py``) share.

Real ``memsearch`` subprocesses against real Milvus Lite databases in temp
directories, the shared ONNX model, and a dump of a collection as the rows a
user can see (id, source, line range, heading, content), which is what "the
same as a clean index" compares. Vectors are left out of the dump (a row's
vector is compared apart, in ``test_vectors.py``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memsearch_fast.lite import broker as lite_broker

# The reliability tests take these from here too.
from tests.helpers.cli import ok as ok
from tests.helpers.cli import one_line_error as one_line_error

ROOT = Path(__file__).resolve().parents[2]
COLLECTION = "memsearch_chunks"
FIELDS = ["source", "start_line", "end_line", "heading", "heading_level", "content"]
Row = tuple[str, int, int, str, int, str]


def cli_env(home: Path, **extra: str) -> dict[str, str]:
    """The environment of a CLI subprocess: a private HOME, offline, no MEMSEARCH_* of ours."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSEARCH_")}
    env.update(
        HOME=str(home),
        MEMSEARCH_LITE_IDLE_TIMEOUT="60",
        MEMSEARCH_OFFLINE="1",
        HF_HUB_OFFLINE="1",
        PYTHONIOENCODING="utf-8",
    )
    env.update(extra)
    home.mkdir(parents=True, exist_ok=True)
    return env


def command(*args: str) -> list[str]:
    return [sys.executable, "-m", "memsearch_fast", *args]


def memsearch(
    args: list[str], env: dict[str, str], *, timeout: float = 300, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command(*args),
        env=env,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        encoding="utf-8",
        errors="replace",
        timeout=timeout,
    )


class Background:
    """A ``memsearch`` subprocess whose output goes to files (no pipe to fill up)."""

    def __init__(self, args: list[str], env: dict[str, str], logs: Path, name: str) -> None:
        logs.mkdir(parents=True, exist_ok=True)
        self.out_path = logs / f"{name}.out"
        self.err_path = logs / f"{name}.err"
        with open(self.out_path, "wb") as out, open(self.err_path, "wb") as err:
            self.proc = subprocess.Popen(command(*args), env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stdout(self) -> str:
        return self.out_path.read_text(encoding="utf-8", errors="replace")

    def stderr(self) -> str:
        return self.err_path.read_text(encoding="utf-8", errors="replace")

    def wait_for(self, needle: str, timeout: float, *, stream: str = "stderr") -> bool:
        """Whether ``needle`` appears in the process's output within ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if needle in (self.stderr() if stream == "stderr" else self.stdout()):
                return True
            if self.proc.poll() is not None:
                return needle in (self.stderr() if stream == "stderr" else self.stdout())
            time.sleep(0.05)
        return False

    def wait(self, timeout: float = 300) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"memsearch pid {self.pid} hung\nstderr:\n{self.stderr()}") from None

    def signal(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.proc.pid, sig)

    def kill(self) -> None:
        self.signal(signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(30)


def index_args(paths: list[Path], db: Path, model: Path, *more: str) -> list[str]:
    return ["index", *(str(p) for p in paths), "--milvus-uri", str(db), "-m", str(model), *more]


def census(db: Path, collection: str = COLLECTION, settle: float = 10.0) -> tuple[dict[str, Row], int]:
    """Every row of the collection by id (source, start, end, heading, level, content)
    and of its span collection (``span:<span id>``), and count(*) plus the span rows:
    more than the distinct ids when a primary key is stored twice.

    A killed client's last upsert may still be applied by the server while the
    rows are read (the iterator reads at the moment it starts, count(*) later),
    so a disagreement is read again for up to ``settle`` seconds first.
    """
    from memsearch_fast.store import MilvusStore

    store = MilvusStore(str(db), collection=collection)
    try:
        if not store.exists:
            return {}, 0
        deadline = time.monotonic() + settle
        while True:
            ids = [h for h, _ in store.iter_ids_by_source(None)]
            count = store.count()
            if count == len(set(ids)) or time.monotonic() > deadline:
                break
            time.sleep(0.25)
        rows = store.rows_for_ids(list(dict.fromkeys(ids)), FIELDS)
        out = {
            r["chunk_hash"]: (
                r["source"],
                int(r["start_line"]),
                int(r["end_line"]),
                r["heading"],
                int(r["heading_level"]),
                r["content"],
            )
            for r in rows
        }
        # Span rows follow their chunks: (source, lines, chunk id, -1, text hash) by span id.
        for page in store.spans.iter_rows():
            for r in page:
                out[f"span:{r['span_id']}"] = (
                    r["source"],
                    int(r["start_line"]),
                    int(r["end_line"]),
                    r["chunk_hash"],
                    -1,
                    r["text_hash"],
                )
        spans = sum(1 for k in out if k.startswith("span:"))
        return out, max(count, len(ids)) + spans
    finally:
        store.close()


def dump(db: Path, collection: str = COLLECTION) -> dict[str, Row]:
    """:func:`census`, asserting that no primary key is stored twice."""
    out, count = census(db, collection)
    assert count == len(out), f"count(*) {count} != {len(out)} distinct rows"
    return out


def ids_by_source(db: Path, collection: str | None = None) -> dict[str, set[str]]:
    """Chunk ids per source (the configured collection unless named), read through the shared server."""
    from memsearch_fast.store import MilvusStore

    store = MilvusStore(str(db), **({"collection": collection} if collection else {}))
    try:
        out: dict[str, set[str]] = {}
        for chunk_id, source in store.iter_ids_by_source():
            out.setdefault(source, set()).add(chunk_id)
        return out
    finally:
        store.close()


def chunk_rows(rows: dict[str, Row]) -> int:
    """The chunks of a :func:`dump` (its span rows left out)."""
    return sum(1 for k in rows if not k.startswith("span:"))


def differences(got: dict[str, Row], want: dict[str, Row]) -> dict[str, int]:
    """Lost, extra (stale) and changed rows of ``got`` against ``want``."""
    lost = want.keys() - got.keys()
    extra = got.keys() - want.keys()
    changed = [k for k in want.keys() & got.keys() if got[k] != want[k]]
    return {"lost": len(lost), "stale": len(extra), "changed": len(changed)}


def assert_same(got: dict[str, Row], want: dict[str, Row], what: str = "") -> None:
    diff = differences(got, want)
    if any(diff.values()):
        lost = sorted({want[k][0] for k in want.keys() - got.keys()})[:5]
        extra = sorted({got[k][0] for k in got.keys() - want.keys()})[:5]
        raise AssertionError(f"{what}: {diff}; sources of lost rows {lost}, of stale rows {extra}")


def stop_servers(base: Path) -> None:
    """Stop every Lite server of a database under ``base``."""
    for state in base.rglob("*.server.json"):
        lite_broker.stop_server(str(state)[: -len(".server.json")])


def server_pids(db: Path) -> list[int]:
    """The pids of the Lite server of ``db`` and of its engine, when one runs."""
    from memsearch_fast.lite import state

    st = state.read_state(str(db)) or {}
    return [p for p in (st.get("pid"), st.get("engine_pid")) if isinstance(p, int)]


def watcher_pids(root: Path) -> list[int]:
    """The pids of the ``memsearch watch`` processes of *root* (argument by argument, from /proc)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"watch" in argv and b"memsearch_fast.cli" in argv and os.fsencode(root) in argv:
                pids.append(int(entry.name))
    return pids


def copy_database(src: Path, dst: Path, collection: str = COLLECTION) -> None:
    """A stopped database, its span file and its manifest, under another name (a snapshot
    to start runs from)."""
    from memsearch_fast.store.manifest import manifest_path
    from memsearch_fast.store.spans.file import path_of

    if src.is_dir():
        shutil.copytree(src, dst)
    else:
        shutil.copy2(src, dst)
    for side in ("", "-wal"):
        if Path(path_of(str(src)) + side).exists():
            shutil.copy2(path_of(str(src)) + side, path_of(str(dst)) + side)
    m = manifest_path(str(src), collection)
    if m.exists():
        shutil.copy2(m, manifest_path(str(dst), collection))


@contextlib.contextmanager
def servers_stopped(base: Path) -> Iterator[None]:
    try:
        yield
    finally:
        stop_servers(base)


def corpus(root: Path, total_bytes: int, seed: int) -> list[Path]:
    """A generated markdown corpus (agent logs and documentation pages)."""
    from tests.helpers.corpus import write_corpus

    write_corpus(root, total_bytes=total_bytes, seed=seed)
    return sorted(root.rglob("*.md"))


def mutate(root: Path, seed: int) -> dict[str, Any]:
    """An incremental change to a corpus: edits, appends, deletes, new files, a rename
    (of regular files outside a ``bad/`` directory)."""
    import random

    rng = random.Random(seed)
    files = sorted(
        p for p in root.rglob("*.md") if p.is_file() and not p.is_symlink() and "bad" not in p.relative_to(root).parts
    )
    rng.shuffle(files)
    n = max(1, len(files) // 6)
    edited, appended, deleted = files[:n], files[n : 2 * n], files[2 * n : 2 * n + max(1, n // 2)]
    for f in edited:
        lines = f.read_text(encoding="utf-8").split("\n")
        i = rng.randrange(1, max(2, len(lines)))
        lines.insert(i, f"An edit made for seed {seed}: the cache is now warmed before the deploy step {i}.")
        f.write_text("\n".join(lines), encoding="utf-8")
    for f in appended:
        with open(f, "a", encoding="utf-8") as fh:
            fh.write(f"\n\n## Added later {seed}\n\nA new finding about retries and idempotency keys, {f.name}.\n")
    for f in deleted:
        f.unlink()
    new_dir = root / "memory" / "new"
    new_dir.mkdir(parents=True, exist_ok=True)
    for i in range(2):
        (new_dir / f"note-{seed}-{i}.md").write_text(
            f"# Note {i}\n\nFresh text {seed}-{i} about the thumbnail service and libvips.\n", encoding="utf-8"
        )
    rest = [f for f in files[2 * n + max(1, n // 2) :] if f.exists()]
    if rest:
        rest[0].rename(rest[0].with_name("renamed-" + rest[0].name))
    return {"edited": len(edited), "appended": len(appended), "deleted": len(deleted)}


# -- runs interrupted from outside ---------------------------------------------------------


@dataclass
class Window:
    """Seconds of an uninterrupted run: from its store being open to its first write, and to its exit."""

    first_write: float
    end: float


class RunWatcher:
    """Tells, from outside, where an index run into a (stopped) database is."""

    def __init__(self, run: Background, db: Path) -> None:
        from memsearch_fast.store.manifest import manifest_path

        self.run, self.db = run, db
        self.manifest = manifest_path(str(db), COLLECTION)
        self.had_manifest = self.manifest.exists()  # an incremental run
        self._store: Any = None

    def store_open(self) -> bool:
        """The run has loaded its model and opened its store: the database's server is up."""
        return bool(lite_broker.server_status(str(self.db)))

    def writing(self) -> bool:
        """The run has begun to write: it removes the manifest just before its first write
        (an incremental run); rows appear (a cold one)."""
        if self.had_manifest:
            return not self.manifest.exists()
        from memsearch_fast.store import MilvusStore

        if self._store is None:
            store = MilvusStore(str(self.db))
            if not store.exists:
                store.close()
                return False
            self._store = store
        return bool(self._store.count() > 0)

    def until(self, cond: Any, timeout: float = 120) -> float:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.run.proc.poll() is None and not cond():
            time.sleep(0.02)
        return time.monotonic()

    def close(self) -> None:
        if self._store is not None:
            self._store.close()


def timed_run(env: dict[str, str], model: Path, db: Path, tree: Path) -> Window:
    """An uninterrupted index run, timed from its store being open."""
    if db.exists():
        lite_broker.stop_server(str(db))
    run = Background(index_args([tree], db, model, "-q"), env, db.parent / "logs", db.stem + "-timed")
    watcher = RunWatcher(run, db)
    try:
        opened = watcher.until(watcher.store_open)
        writing = watcher.until(watcher.writing)
        assert run.wait(300) == 0, run.stderr()
        return Window(writing - opened, time.monotonic() - opened)
    finally:
        watcher.close()


def signal_and_repair(
    env: dict[str, str],
    model: Path,
    db: Path,
    tree: Path,
    delay: float,
    sig: int = signal.SIGKILL,
    *,
    from_writes: bool = False,
    repair_ok: tuple[int, ...] = (0,),
) -> tuple[int | None, str, int]:
    """Start an index run of ``tree`` into ``db``, send ``sig`` ``delay`` seconds after its
    store is open (or after its first write), then run a clean index; (the signalled
    run's status, its stderr, the rows it left)."""
    run = Background(index_args([tree], db, model, "-q"), env, db.parent / "logs", db.stem)
    watcher = RunWatcher(run, db)
    try:
        t0 = watcher.until(watcher.store_open)
        if from_writes:
            t0 = watcher.until(watcher.writing)
        if not exits_within(run, t0 + delay):
            run.signal(sig)
        status = run.wait(120)
    finally:
        watcher.close()
    left = len(dump(db)) if db.exists() else 0
    repair = memsearch(index_args([tree], db, model, "-q"), env)
    assert repair.returncode in repair_ok, f"rc={repair.returncode}\n{repair.stderr}"
    return status, run.stderr(), left


def exits_within(run: Background, deadline: float) -> bool:
    while time.monotonic() < deadline:
        if run.proc.poll() is not None:
            return True
        time.sleep(0.005)
    return run.proc.poll() is not None


# -- bad inputs ----------------------------------------------------------------------------


def bad_corpus(root: Path, seed: int) -> dict[str, Path]:
    """A few good files and every kind of bad one; what each is, by name."""
    corpus(root, 15_000, seed=seed)
    bad = {
        "invalid_utf8": root / "invalid-utf8.md",
        "nul": root / "nul-bytes.md",
        "long_line": root / "one-5mb-line.md",
        "headings": root / "ten-thousand-headings.md",
        "loop_a": root / "loop-a.md",
        "loop_b": root / "loop-b.md",
        "fifo": root / "pipe.md",
        "forged_name": root / "forged\n  FORGED-LINE: indexed fine.md",
        "dir_as_md": root / "folder.md",
    }
    bad["invalid_utf8"].write_bytes(b"# Bytes\n\nvalid text, then \xff\xfe\xc3 not UTF-8, then more text\n")
    bad["nul"].write_bytes(b"# Nul\n\nbefore\x00after\n\x00\x00\x00\n## Next\n\ntext\n")
    # One 5 MB line (repeated words: the line's length is the hazard, not its embeddings).
    bad["long_line"].write_text("# Long\n\n" + "lorem ipsum dolor sit amet " * 200_000 + "\n", encoding="utf-8")
    bad["headings"].write_text("".join(f"## Step {i % 10}\nrun step {i % 10}\n" for i in range(10_000)))
    os.symlink(bad["loop_b"].name, bad["loop_a"])
    os.symlink(bad["loop_a"].name, bad["loop_b"])
    os.mkfifo(bad["fifo"])
    os.symlink(root / "nowhere.md", bad["forged_name"])  # a failure whose name holds a newline
    bad["dir_as_md"].mkdir()
    (bad["dir_as_md"] / "inside.md").write_text("# Inside\n\nA note in a directory named like a file.\n")
    return bad
