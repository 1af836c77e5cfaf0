"""The watched roots of a database, inside its service process.

Sessions and ``memsearch watch`` register roots here (``watch.lease``) instead of each running a process with
its own model. One watch loop per root, collection and settings, however many leases name it, all fed by one
file watcher (:mod:`.notify`: one inotify instance, however many roots): the same
:func:`memsearch_fast.index.watch.watch` loop as ``memsearch watch``, each run an ordinary index run of that
root through a ``MemSearch`` on the database path (so the writer lock, the manifest and lazy sync's record are
exactly a CLI run's), embedding with the model the service lends (:mod:`.models`). Runs of one collection go one
at a time; the others wait in the queue. Each watcher holds the root's watcher lock
(:mod:`memsearch_fast.index.watch_lock`), so a ``memsearch watch`` of the same root (the database given as the
same resolved path) finds it taken, and a watcher here waits while such a process watches.

A lease names its holder (a session id) and, where known, its pid. It lapses when that process is gone or after
:data:`DEFAULT_LEASE_S` seconds without renewal (``MEMSEARCH_WATCH_LEASE_S``); hooks renew at their events (at
most every 30 s), and a session idle longer is re-registered at its next event. A root whose last lease lapsed
or was released is unwatched after its run in hand is written; one whose path now leads through a link loses its
leases and rows (:mod:`.root_guard`). While any root is watched the service counts as active, so it does not
exit idle.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import time
from collections.abc import AsyncIterator, Callable, Collection, Coroutine, Mapping
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from memsearch_fast.index.report import RunCounts
from memsearch_fast.serve import root_guard
from memsearch_fast.serve.follow import Follower
from memsearch_fast.serve.leases import Lease, pid_start, ttl_of
from memsearch_fast.serve.models import Models
from memsearch_fast.serve.notify import Hub

if TYPE_CHECKING:
    from memsearch_fast.index.watch_lock import WatchLock
    from memsearch_fast.serve import protocol

logger = logging.getLogger(__name__)
_T = TypeVar("_T")

ENV_LEASE = "MEMSEARCH_WATCH_LEASE_S"
#: Seconds a lease lives without renewal (the hooks renew at every event).
DEFAULT_LEASE_S = 120.0
#: How often leases are checked and the service marked active (seconds).
CHECK_S = 1.0
#: How long stopping the service waits for the runs in hand to write what they embedded.
STOP_WAIT_S = 30.0


@dataclass
class Watched:
    """One root watched for one collection with one set of chunk and scan settings."""

    key: tuple[Any, ...]
    root: str
    collection: str
    settings: dict[str, Any]
    leases: dict[str, Lease] = field(default_factory=dict)
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None
    state: str = "starting"
    runs: int = 0
    last: dict[str, Any] | None = None
    #: Set by a ``memsearch watch`` that joins: it wants to see a run.
    rerun: asyncio.Event = field(default_factory=asyncio.Event)
    ended: bool = False
    #: How far the run in hand is (files read, chunks embedded), while there is one.
    counts: RunCounts | None = None

    def describe(self, now: float) -> dict[str, Any]:
        return {
            "root": self.root,
            "collection": self.collection,
            "state": self.state,
            "runs": self.runs,
            "last_run": self.last,
            "run": None if self.counts is None else asdict(self.counts),
            "leases": [
                {"holder": x.holder, "pid": x.pid, "expires_in": round(max(0.0, x.expires - now), 1)}
                for x in self.leases.values()
            ],
        }


def _key(req: Mapping[str, Any], root: str) -> tuple[Any, ...]:
    return (
        str(req["collection"]),
        root,
        str(req["model_dir"]),
        str(req["model_name"]),
        int(req["max_chunk_size"]),
        int(req["overlap_lines"]),
        tuple(sorted(str(x) for x in req.get("ignore_files") or ())),
        tuple(sorted(str(x) for x in req.get("exclude") or ())),
    )


class Registry:
    """The watchers of one database, on an event loop of their own (a thread)."""

    def __init__(
        self,
        db_path: str,
        models: Models,
        touch: Callable[[], None],
        used: Callable[[str], None] = lambda _collection: None,
    ) -> None:
        from memsearch_fast.config import environment

        self.db_path = db_path
        self.models = models
        self._touch = touch
        self._used = used  # a run keeps its collection loaded in the engine (.keeper)
        self.lease_s = environment.number(ENV_LEASE, DEFAULT_LEASE_S)
        self._watched: dict[tuple[Any, ...], Watched] = {}
        self._followers: list[Follower] = []
        #: ``memsearch index`` runs started here (:mod:`.runs`), and those in hand.
        self.index_runs = 0
        self._runs: set[asyncio.Task[Any]] = set()
        self._connections = 0  # names each follower's lease apart
        self._loop = asyncio.new_event_loop()
        self._slots: dict[str, asyncio.Lock] = {}
        self._queued = 0
        self._closing: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._main, name="watchers", daemon=True)
        self._stopped = False
        #: One file watcher (an inotify instance) for every root watched here.
        self.hub = Hub()

    def start(self) -> Registry:
        self._thread.start()
        return self

    def _main(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._closing = asyncio.Event()
        try:
            self._loop.run_until_complete(self._tend())
        finally:
            self.hub.close()
            self._loop.close()

    async def _tend(self) -> None:
        """Check the leases each :data:`CHECK_S`; keep the service active while any root is watched."""
        assert self._closing is not None
        while not self._closing.is_set():
            now = time.monotonic()
            for w in list(self._watched.values()):
                for holder, lease in list(w.leases.items()):
                    why = lease.lapsed(now)
                    if why:
                        logger.warning("lease of %s on %s lapsed: %s", holder, w.root, why)
                        del w.leases[holder]
                if not w.leases:
                    w.stop.set()
            if self._watched:
                self._touch()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._closing.wait(), CHECK_S)
        # The runs in hand are cancelled as Ctrl-C cancels an index (what they embedded is
        # written and flushed): waiting for them kept a stopped service as long as a cold run.
        tasks = [w.task for w in self._watched.values() if w.task is not None] + list(self._runs)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=STOP_WAIT_S)

    @property
    def closing(self) -> bool:
        """Whether the service is stopping (a run cancelled now was not cancelled by its client)."""
        return self._stopped

    def stop(self) -> None:
        """Stop every watcher, its run in hand cancelled (what it embedded is kept); idempotent."""
        was, self._stopped = self._stopped, True
        if was or not self._thread.is_alive():
            return
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(lambda: self._closing.set() if self._closing else None)
        self._thread.join(STOP_WAIT_S + 5)

    # -- requests (from the service's socket thread) ------------------------------------

    def handle(
        self, req: protocol.WatchLease | protocol.WatchRelease | protocol.WatchList
    ) -> protocol.LeaseAnswer | protocol.ReleaseAnswer | protocol.ListAnswer | protocol.Refused:
        """A request read by :func:`.protocol.read`: its fields are there and of their types."""
        if self._stopped or not self._thread.is_alive():
            return {"error": "the service is stopping"}
        try:
            if req["op"] == "watch.lease":
                return self._result(self._lease(req))
            if req["op"] == "watch.release":
                return self._result(self._release(req))
            return self._result(self._list())
        except (KeyError, TypeError, ValueError) as exc:
            return {"error": f"bad request: {exc}"}

    def _result(self, coro: Coroutine[Any, Any, _T]) -> _T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout=10)

    def follow(self, req: protocol.WatchFollow, pid: int | None) -> tuple[Mapping[str, Any], Follower | None]:
        """Register a ``memsearch watch`` client's roots (``watch.follow``): the reply, and
        the :class:`Follower` whose events to stream (None: already followed, or an error)."""
        try:
            reply: tuple[Mapping[str, Any], Follower | None] = self._call(self._follow(req, pid))
            return reply
        except (KeyError, TypeError, ValueError) as exc:
            return {"error": f"bad request: {exc}"}, None

    def renew(self, follower: Follower, roots: Collection[str]) -> None:
        """Renew the client's leases on *roots* (those of its roots still watched)."""
        request = follower.request.copy()
        request["roots"] = sorted(roots)
        self._call(self._lease(request))

    def unfollow(self, follower: Follower) -> None:
        """The client is gone: drop its leases (a root nobody else holds is unwatched)."""
        self._call(self._unfollow(follower))

    def _call(self, coro: Any) -> Any:
        if self._stopped or not self._thread.is_alive():
            coro.close()
            raise RuntimeError("the service is stopping")
        fut = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return fut.result(timeout=10)
        except TimeoutError:
            fut.cancel()  # not done later behind the caller's back
            raise

    def describe(self) -> protocol.Roots:
        """Roots, leases, last runs and the queue (for ``status``), read from any thread."""
        now = time.monotonic()
        roots = [w.describe(now) for w in list(self._watched.values())]
        return {"roots": roots, "queue": self._queued, "index_runs": self.index_runs}

    async def _list(self) -> protocol.ListAnswer:
        return {"ok": True, **self.describe()}

    async def _follow(
        self, req: protocol.WatchFollow, pid: int | None
    ) -> tuple[protocol.FollowAnswer | protocol.LeaseAnswer, Follower | None]:
        collection = str(req["collection"])
        roots = frozenset(str(r) for r in req["roots"])
        for other in self._followers:  # one `memsearch watch` per database, collection and root set
            # Gone, or this very client connecting again: its thread has yet to notice.
            gone = other.pid == pid or (other.pid is not None and pid_start(other.pid) is None)
            if other.collection == collection and other.roots == roots and not gone:
                return {"already_running": True, "pid": other.pid, "roots": sorted(roots)}, None
        self._connections += 1
        # One lease per connection: the old connection's release must not take the new one's lease.
        holder = f"watch:{pid}:{self._connections}"
        request = req.copy()
        request["holder"], request["pid"] = holder, pid
        before = {root: self._watched.get(_key(request, root)) for root in roots}
        reply = await self._lease(request)
        if not reply.get("ok"):
            return reply, None
        follower = Follower(request, holder, pid, collection, roots, frozenset(_key(request, r) for r in roots))
        self._followers.append(follower)
        for w in before.values():  # a watcher that was already there runs again, for this client to see
            if w is not None and self._watched.get(w.key) is w:
                w.rerun.set()
        return reply, follower

    async def _unfollow(self, follower: Follower) -> None:
        if follower in self._followers:
            self._followers.remove(follower)
        await self._release(
            {
                "op": "watch.release",
                "holder": follower.holder,
                "roots": list(follower.roots),
                "collection": follower.collection,
            }
        )

    def _publish(self, w: Watched, data: dict[str, Any]) -> None:
        """Hand one event of *w* to the clients that follow its root."""
        if self._watched.get(w.key) is not w:
            return  # a watcher being replaced: its successor speaks for the root
        if data["event"] == "stopped":
            w.ended = True
            if self._closing is not None and self._closing.is_set():
                data["service"] = "stopping"  # the client connects again, to the next service
        for follower in self._followers:
            if w.key in follower.keys:
                follower.events.put({**data, "root": w.root})

    async def _lease(self, req: protocol.WatchLease | protocol.WatchFollow) -> protocol.LeaseAnswer:
        holder = str(req["holder"])
        pid = req.get("pid")
        pid = pid if isinstance(pid, int) and not isinstance(pid, bool) and pid > 0 else None
        started = pid_start(pid) if pid is not None else None
        if pid is not None and started is None:
            return {"error": f"pid {pid} is not running"}
        ttl = ttl_of(req.get("ttl") if req["op"] == "watch.lease" else None, self.lease_s)
        roots = [str(r) for r in req["roots"]]
        if not roots or not all(os.path.isabs(r) for r in roots):
            return {"error": "roots must be absolute paths"}
        added = []
        for root in roots:
            key = _key(req, root)
            w = self._watched.get(key)
            if w is None or w.stop.is_set():
                before = w.task if w is not None else None  # writes its run in hand first
                w = self._watched[key] = Watched(key, root, key[0], dict(req))
                w.task = asyncio.create_task(self._watch(w, before))
                added.append(root)
            w.leases[holder] = Lease(holder, pid, started, ttl, time.monotonic() + ttl)
        self._touch()
        return {"ok": True, "added": added, "lease_s": ttl}

    async def _release(self, req: protocol.WatchRelease) -> protocol.ReleaseAnswer:
        holder = str(req["holder"])
        roots = req.get("roots")
        collection = req.get("collection")
        released = []
        for w in list(self._watched.values()):
            if roots is not None and w.root not in roots:
                continue
            if collection is not None and w.collection != collection:
                continue
            if w.leases.pop(holder, None) is not None:
                released.append(w.root)
            if not w.leases:
                w.stop.set()
        return {"ok": True, "released": released}

    # -- one watcher ---------------------------------------------------------------------

    def memsearch(self, paths: list[str], s: Mapping[str, Any]) -> Any:
        """A ``MemSearch`` on this database with a request's settings; the model is lent per run."""
        from memsearch_fast.api import MemSearch

        return MemSearch(
            paths,
            embedding_provider="onnx",
            embedding_model=str(s["model_dir"]),
            embedding_options={"model_name": str(s["model_name"])},
            milvus_uri=self.db_path,
            collection=str(s["collection"]),
            max_chunk_size=int(s["max_chunk_size"]),
            overlap_lines=int(s["overlap_lines"]),
            ignore_files=list(s.get("ignore_files") or []),
            exclude=list(s.get("exclude") or []),
            description=str(s.get("description") or ""),
        )

    @contextlib.asynccontextmanager
    async def turn(self, collection: str) -> AsyncIterator[None]:
        """One index run at a time per collection (the others wait in the queue),
        so a long ``memsearch index`` does not hold up other projects' watchers,
        as two processes would not; a run keeps its collection loaded."""
        slot = self._slots.get(collection) or self._slots.setdefault(collection, asyncio.Lock())
        self._queued += 1
        try:
            await slot.acquire()
        finally:
            self._queued -= 1
        try:
            self._used(collection)
            yield
        finally:
            self._used(collection)
            slot.release()

    def submit(self, coro: Any) -> asyncio.Task[Any]:
        """Start *coro* as a task on the watchers' loop (from another thread)."""

        async def start() -> asyncio.Task[Any]:
            task = asyncio.create_task(coro)
            self._runs.add(task)
            task.add_done_callback(self._runs.discard)
            return task

        task: asyncio.Task[Any] = self._call(start())
        return task

    def cancel(self, task: asyncio.Task[Any]) -> None:
        self._loop.call_soon_threadsafe(task.cancel)

    async def _watch(self, w: Watched, before: asyncio.Task[None] | None) -> None:
        from memsearch_fast.index.watch import watch

        if before is not None:
            await asyncio.wait([before])
        lock = await self._lock(w)
        if lock is None:  # stopped while waiting, or no lock file: the root is not watched here
            self._end(w)
            return
        ms = self.memsearch([w.root], w.settings)
        loop = asyncio.get_running_loop()

        # A run that waits for another writer says so to the clients that follow the root.
        ms.on_wait = lambda line: loop.call_soon_threadsafe(self._publish, w, {"event": "waiting", "message": line})

        async def run() -> Any:
            w.state = "queued"
            async with self.turn(w.collection):
                if refused := await asyncio.to_thread(root_guard.refused, ms, w.root):  # as the hooks check it
                    w.leases.clear()
                    w.stop.set()
                    raise RuntimeError(refused)
                w.state, w.counts = "indexing", RunCounts()
                try:
                    with self.models.lend(ms, str(w.settings["model_dir"]), str(w.settings["model_name"])):
                        return await ms.index_with_report(progress=w.counts)
                finally:
                    w.state, w.counts = "watching", None
                    # Between runs a root holds no connection nor file (the span file and its
                    # journal: two descriptors a root, which 500 roots made 1,000).
                    await asyncio.to_thread(ms.close_store)

        try:
            async for event in watch(
                run,
                [w.root],
                ignore_files=ms.ignore_files,
                debounce_ms=int(w.settings.get("debounce_ms") or 0),
                stop=w.stop,
                database=self.db_path,
                rerun=w.rerun,
                source=self.hub.changes,
            ):
                self._record(w, event)
                self._publish(w, event.as_dict())
        except Exception as exc:  # noqa: BLE001 - one root's failure must not stop the others
            logger.warning("watcher of %s failed: %s", w.root, exc)
            self._publish(w, {"event": "failed", "error": f"the watcher of {w.root} failed: {exc}"})
        finally:
            w.stop.set()
            await asyncio.to_thread(ms.close)
            lock.release()
            self._end(w)

    def _end(self, w: Watched) -> None:
        """*w* watches no more: its followers hear so, and the service may idle out."""
        if not w.ended:
            self._publish(w, {"event": "stopped", "reason": "stopped"})
        w.stop.set()
        if self._watched.get(w.key) is w:
            del self._watched[w.key]

    async def _lock(self, w: Watched) -> WatchLock | None:
        """The root's watcher lock, as ``memsearch watch`` takes it (one watcher per
        database and root, whichever process runs it): while a ``memsearch watch``
        process holds it, that process watches the root and this one waits."""
        from memsearch_fast.index.watch_lock import WatchLock, lock_base

        lock = WatchLock(lock_base(self.db_path, w.collection, [w.root]))
        while not w.stop.is_set():
            try:
                if await asyncio.to_thread(lock.acquire, [w.root]):
                    return lock
            except OSError as exc:
                logger.warning("cannot take the watcher lock of %s: %s", w.root, exc)
                self._publish(w, {"event": "failed", "error": f"cannot take the watcher lock of {w.root}: {exc}"})
                return None
            holder = lock.holder().pid
            state = (
                f"waiting: this service already watches {w.root} for another collection, model or settings"
                if holder == os.getpid()
                else f"waiting for pid {holder} (a memsearch watch of this root)"
            )
            if state != w.state:  # the clients that follow the root hear why nothing happens yet
                w.state = state
                self._publish(w, {"event": "waiting", "message": state})
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(w.stop.wait(), CHECK_S)
        return None

    @staticmethod
    def _record(w: Watched, event: Any) -> None:
        if event.kind == "indexed":
            w.runs += 1
            r = event.report
            w.last = {
                "at": time.time(),
                "changes": event.changes,
                "files": r.files,
                "changed": r.changed,
                "embedded": r.embedded,
                "deleted": r.deleted,
                "seconds": round(r.seconds, 3),
            }
        elif event.kind == "error":
            w.last = {"at": time.time(), "error": event.error, "retry_in": event.retry_in}
        elif event.error:
            logger.warning("stopped watching %s: %s", w.root, event.error)
