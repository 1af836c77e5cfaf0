"""``memsearch index`` run by the database's service, with the model it has loaded.

A CLI ``index`` of a local database whose service already holds the ONNX
model sends its run here (``index.run``) instead of loading a second copy: the
run goes through the watchers' queue (one run of a collection at a time, the same writer
lock, manifest and lazy-sync record as any run), and the connection carries
the run's progress calls, a ``waiting`` line when another writer holds the
collection, and the final report. The client cancels with a ``cancel`` line
(Ctrl-C, SIGTERM) or by closing the connection (kill -9); either way what
was embedded is written and flushed before the run ends, as in process.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import socket
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from memsearch_fast.serve import protocol
from memsearch_fast.serve.client import pending

if TYPE_CHECKING:
    from memsearch_fast.serve.watchers import Registry

logger = logging.getLogger(__name__)

#: The last event of a run: its report, its cancellation, or its error.
FINAL = ("report", "cancelled", "failed")
POLL_S = 0.1


class Relay:
    """The run's progress calls, handed to the client to draw (``index.report.Progress``)."""

    def __init__(self, events: queue.Queue[dict[str, Any]]) -> None:
        self._events = events

    def _put(self, call: str, *args: int) -> None:
        self._events.put({"event": "progress", "call": call, "args": list(args)})

    def start(self, files: int, size: int = 0) -> None:
        self._put("start", files, size)

    def files_done(self, files: int, chunks: int, size: int = 0) -> None:
        self._put("files_done", files, chunks, size)

    def chunks_embedded(self, n: int) -> None:
        self._put("chunks_embedded", n)

    def work(self, queued: int, done: int) -> None:
        self._put("work", queued, done)

    def spans_done(self, done: int, total: int) -> None:
        self._put("spans_done", done, total)

    def finish(self) -> None:
        """The client finishes its own display when the run ends."""


async def run(registry: Registry, req: protocol.IndexRun, events: queue.Queue[dict[str, Any]]) -> None:
    """One index run of the request's paths; its last event is one of :data:`FINAL`."""
    from memsearch_fast.errors import describe

    ms = None
    try:
        ms = registry.memsearch(list(req["paths"]), req)
        ms.on_wait = lambda line: events.put({"event": "waiting", "message": line})
        async with registry.turn(req["collection"]):
            registry.index_runs += 1
            with registry.models.lend(ms, req["model_dir"], req["model_name"]):
                report = await ms.index_with_report(force=req.get("force", False), progress=Relay(events))
        events.put({"event": "report", **report.as_dict()})
    except asyncio.CancelledError:
        # Cancelled by the client, or by the service stopping: then the client carries on by itself.
        events.put({"event": "cancelled", **({"service": "stopping"} if registry.closing else {})})
    except Exception as exc:  # noqa: BLE001 - the client says it in one line
        events.put({"event": "failed", "error": describe(exc)})
    finally:
        if ms is not None:
            await asyncio.to_thread(ms.close)
        from memsearch_fast._os import give_back_memory

        # What the run's pipeline freed goes back to the system, as after a watcher's
        # run: the service otherwise kept the RSS of its busiest run (330 MB after 15 MB).
        await asyncio.to_thread(give_back_memory)


def start(conn: socket.socket, registry: Registry, req: protocol.IndexRun, touch: Callable[[], None]) -> None:
    """Serve *conn* on a thread of its own; the thread closes it. *touch* marks
    the service active (a run in hand keeps it from exiting idle)."""
    threading.Thread(target=_serve, args=(conn, registry, req, touch), name="index-run", daemon=True).start()


def _serve(conn: socket.socket, registry: Registry, req: protocol.IndexRun, touch: Callable[[], None]) -> None:
    events: queue.Queue[dict[str, Any]] = queue.Queue()
    connected = True
    try:
        conn.settimeout(10)
        task = registry.submit(run(registry, req, events))
        cancelled = False
        while True:
            touch()
            if not cancelled and (not connected or _asked_to_stop(conn)):
                registry.cancel(task)  # the run writes and flushes what it embedded, then ends
                cancelled = True
            try:
                data = events.get(timeout=POLL_S)
            except queue.Empty:
                continue
            if connected:
                try:
                    conn.sendall(protocol.reply(data))
                except OSError:
                    connected = False
            if data["event"] in FINAL:
                return
    except Exception as exc:  # noqa: BLE001 - the client sees its connection end
        logger.info("index run ended: %s", exc)
    finally:
        with contextlib.suppress(OSError):
            conn.close()


def _asked_to_stop(conn: socket.socket) -> bool:
    """A ``cancel`` line, or the client gone."""
    return pending(conn) is not None
