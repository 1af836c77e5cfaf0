"""The operations of the database's service socket: one typed definition each.

A request is one JSON object on one line: ``op`` names the operation, ``v``
the protocol :data:`VERSION` and ``code`` the sender's installation
(:func:`code_id`), so a service started before an upgrade answers nothing a
client would use. A client writes an operation's body as its TypedDict (so
the type checker sees every field) and sends :func:`encode`'s line, which
stamps both. The service passes every line it reads through :func:`read`
before dispatching: it gets the typed request, or a :class:`Refusal` whose
one line it sends back, so a bad request never costs a dropped connection.
``{"unsupported": ...}`` (another version, another installation) sends the
client back to doing the work itself; ``{"error": ...}`` says what was wrong.

Standard library only: the CLI imports this on its fast paths. (No postponed
annotations either: :func:`_fields` reads the TypedDicts' at run time, and
evaluated once at import they cost less than strings made into references.)
"""

import json
import os
import types
from collections.abc import Mapping
from functools import cache
from typing import (
    Any,
    Literal,
    NamedTuple,
    TypeAlias,
    TypedDict,
    Union,
    cast,
    get_args,
    get_origin,
    get_type_hints,
    is_typeddict,
)

#: Protocol version; a service of another version answers nothing we use.
VERSION = 1
#: The longest request line a service reads.
LINE_LIMIT = 1 << 20


def code_id() -> str:
    """This installation of memsearch-fast: version, place and install time. A
    server started before an upgrade must not answer for the new code."""
    import memsearch_fast

    init = os.path.realpath(memsearch_fast.__file__)
    try:
        stamp = os.stat(init).st_mtime_ns
    except OSError:
        stamp = 0
    return f"{memsearch_fast.__version__}:{init}:{stamp}"


# -- requests (the bodies a client writes; optional fields in a total=False subclass) ----


class Render(TypedDict, total=False):
    """The output tiers of ``memsearch search`` (:func:`memsearch_fast.recall.render_search`)."""

    json_output: bool
    digest: bool
    budget: int | None
    min_score: float | None


class _Search(TypedDict):
    op: Literal["search"]
    collection: str
    model_dir: str
    model_name: str
    query: str
    top_k: int


class Search(_Search, total=False):
    """A ``memsearch search`` made with the service's model; the output as the CLI prints it."""

    source_prefix: str | None
    explain: bool
    render: Render


class Status(TypedDict):
    """What the service says of itself: models, roots, leases, queue."""

    op: Literal["status"]


class RunSettings(TypedDict):
    """How a root is indexed, exactly as the client would index it (leases and ``index.run``)."""

    collection: str
    model_dir: str
    model_name: str
    max_chunk_size: int
    overlap_lines: int
    ignore_files: list[str]
    exclude: list[str]


class _Lease(RunSettings):
    op: Literal["watch.lease"]
    roots: list[str]
    holder: str


class WatchLease(_Lease, total=False):
    """Register (or renew) *holder*'s lease on absolute *roots*."""

    pid: int | None
    debounce_ms: int
    #: Seconds between renewals asked for; anything but a number is the default (:func:`.leases.ttl_of`).
    ttl: object


class _Release(TypedDict):
    op: Literal["watch.release"]
    holder: str


class WatchRelease(_Release, total=False):
    """Drop *holder*'s leases: of *roots* in *collection*, or all of them."""

    roots: list[str]
    collection: str


class WatchList(TypedDict):
    """The watched roots, their leases and the queue."""

    op: Literal["watch.list"]


class _Follow(RunSettings):
    op: Literal["watch.follow"]
    roots: list[str]


class WatchFollow(_Follow, total=False):
    """A ``memsearch watch``: its roots leased while the connection lives, their events streamed."""

    holder: str  # the service names the lease after the connection
    pid: int | None  # the socket's peer where the OS says
    debounce_ms: int
    description: str


class _IndexRun(RunSettings):
    op: Literal["index.run"]
    paths: list[str]


class IndexRun(_IndexRun, total=False):
    """A ``memsearch index`` run with the service's model; its progress and report streamed."""

    description: str
    force: bool


class _Expand(TypedDict):
    op: Literal["expand"]
    collection: str
    chunk_hash: str


class Expand(_Expand, total=False):
    """``memsearch expand`` of one chunk (no model needed)."""

    section: bool
    lines: int | None


class Stats(TypedDict):
    """``memsearch stats`` of one collection (no model needed)."""

    op: Literal["stats"]
    collection: str


Request: TypeAlias = Search | Status | WatchLease | WatchRelease | WatchList | WatchFollow | IndexRun | Expand | Stats


# -- answers (one line each; a streamed operation's first line, then its events) ---------


class Refused(TypedDict, total=False):
    """Any operation's answer when it is not made: the client does it itself, or says why."""

    unsupported: str
    error: str


class SearchAnswer(Refused, total=False):
    text: str
    missing: bool


class Roots(TypedDict):
    """The watched roots (each with its leases and last run), the queue, the index runs taken."""

    roots: list[dict[str, Any]]
    queue: int
    index_runs: int


class StatusAnswer(Roots):
    models: list[dict[str, Any]]
    searchers: int
    release: dict[str, Any] | None


class LeaseAnswer(Refused, total=False):
    ok: bool
    added: list[str]
    lease_s: float


class ReleaseAnswer(Refused, total=False):
    ok: bool
    released: list[str]


class ListAnswer(Roots):
    ok: bool


class FollowAnswer(LeaseAnswer, total=False):
    """The registration's reply; then one watch event per line (``event``: ``indexed``, ``stopped``...)."""

    already_running: bool
    pid: int | None
    roots: list[str]


class RunEvent(Refused, total=False):
    """One line of an index run: ``progress``, ``waiting``, then ``report``, ``cancelled`` or ``failed``."""

    event: str


class ReadAnswer(Refused, total=False):
    """``result``: the reply of :meth:`MemSearch.expand` or :meth:`MemSearch.stats` (None: unknown or missing)."""

    result: dict[str, Any] | None


Answer: TypeAlias = SearchAnswer | StatusAnswer | LeaseAnswer | ReleaseAnswer | ListAnswer | ReadAnswer | Refused


class Operation(NamedTuple):
    """One operation of the socket: its name, request, answer, and whether its connection stays open."""

    name: str
    request: type
    answer: type
    streamed: bool = False


OPERATIONS: dict[str, Operation] = {
    op.name: op
    for op in (
        Operation("search", Search, SearchAnswer),
        Operation("status", Status, StatusAnswer),
        Operation("watch.lease", WatchLease, LeaseAnswer),
        Operation("watch.release", WatchRelease, ReleaseAnswer),
        Operation("watch.list", WatchList, ListAnswer),
        Operation("watch.follow", WatchFollow, FollowAnswer, streamed=True),
        Operation("index.run", IndexRun, RunEvent, streamed=True),
        Operation("expand", Expand, ReadAnswer),
        Operation("stats", Stats, ReadAnswer),
    )
}


# -- building and reading ----------------------------------------------------------------


def encode(body: Request) -> bytes:
    """The line a client sends: *body* stamped with :data:`VERSION` and this installation."""
    return json.dumps({**body, "v": VERSION, "code": code_id()}).encode("utf-8") + b"\n"


class Refusal(NamedTuple):
    """Why a request is not made (:attr:`reason`), and the one line that says so (:attr:`answer`)."""

    reason: str
    answer: Refused


def _error(reason: str) -> Refusal:
    return Refusal(reason, {"error": reason})


def read(line: bytes, code: str | None) -> Request | Refusal:
    """The typed request in one line a service read, or why it is refused (*code*: the
    service's own; None where no stamp is expected, as in a request not sent yet)."""
    if len(line) > LINE_LIMIT:
        return _error(f"a request is at most {LINE_LIMIT} bytes")
    try:
        data = json.loads(line)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        return _error(f"not a JSON request: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}")
    return check(data, code)


def check(data: object, code: str | None = None) -> Request | Refusal:
    """*data* as its operation's typed request, or why not. With *code*, the envelope too:
    another version is ``unsupported: request``, another installation says so."""
    if not isinstance(data, dict):
        return _error("a request is one JSON object")
    if code is not None:
        v = data.get("v")
        if isinstance(v, bool) or v != VERSION:
            return Refusal(f"protocol version {v!r}, not {VERSION}", {"unsupported": "request"})
        if data.get("code") != code:
            other = "another installation of memsearch-fast"
            return Refusal(other, {"unsupported": other})
    op = data.get("op")
    operation = OPERATIONS.get(op) if isinstance(op, str) else None
    if operation is None:
        return _error(f"unknown operation {op!r}")
    wrong = _wrong(data, operation.request)
    if wrong:
        return _error(f"bad {op} request: {wrong}")
    return cast(Request, data)


@cache
def _fields(kind: type) -> tuple[tuple[str, Any, bool], ...]:
    """(name, type, required) of a TypedDict's fields, read once."""
    hints = get_type_hints(kind)
    required: frozenset[str] = getattr(kind, "__required_keys__", frozenset())
    return tuple((name, hints[name], name in required) for name in hints)


def _wrong(data: Mapping[str, Any], kind: type) -> str:
    """What is wrong with *data* as a *kind*: a missing field or one of the wrong type; "" when nothing."""
    for name, hint, required in _fields(kind):
        value = data.get(name)
        if name not in data:
            if required:
                return f"missing {name!r}"
        elif is_typeddict(hint) and isinstance(value, dict) and (inner := _wrong(value, hint)):
            return f"{name!r}: {inner}"
        elif not _fits(value, hint):
            return f"{name!r} is not {_shown(hint)}"
    return ""


def _fits(value: object, hint: Any) -> bool:
    origin = get_origin(hint)
    if hint is object or hint is Any:
        return True
    if origin is Literal:
        return any(value == x and type(value) is type(x) for x in get_args(hint))
    if origin is Union or origin is types.UnionType:
        return any(_fits(value, x) for x in get_args(hint))
    if origin is list:
        return isinstance(value, list) and all(_fits(x, get_args(hint)[0]) for x in value)
    if origin is dict:
        return isinstance(value, dict) and all(isinstance(k, str) for k in value)
    if is_typeddict(hint):
        return isinstance(value, dict) and not _wrong(value, hint)
    if hint is type(None):
        return value is None
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, hint)  # str, bool


def _shown(hint: Any) -> str:
    """A type as a reader of the error reads it (``a list of str``, ``int or null``)."""
    origin = get_origin(hint)
    if origin is Union or origin is types.UnionType:
        return " or ".join(_shown(x) for x in get_args(hint))
    if origin is list:
        return f"a list of {_shown(get_args(hint)[0])}"
    if origin is dict or is_typeddict(hint):
        return "an object"
    if hint is type(None):
        return "null"
    if origin is Literal:
        return " or ".join(repr(x) for x in get_args(hint))
    return getattr(hint, "__name__", str(hint))


def answer(line: bytes) -> dict[str, Any] | None:
    """One line a client read back as the object it is, or None when it is none."""
    try:
        data = json.loads(line)
    except (ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) else None


def _plain(value: Any) -> Any:
    """numpy scalars as Python numbers (everything else is already JSON)."""
    if hasattr(value, "item"):
        return value.item()
    raise TypeError(f"{type(value).__name__} is not JSON")


def reply(data: Mapping[str, Any]) -> bytes:
    """The line a service sends back: an answer, a refusal or a streamed event."""
    return json.dumps(data, default=_plain).encode("utf-8") + b"\n"
