"""The service socket's operations (:mod:`memsearch_fast.serve.protocol`).

Every operation's good request is read back as itself; an unknown operation,
a missing or wrongly typed field, another version or another installation is
refused with one line; and a real :class:`~memsearch_fast.serve.search.Service`
answers a refused request with that one line and closes the connection.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import socket
import sys
from pathlib import Path
from typing import Any, get_args, get_type_hints

import pytest

from memsearch_fast.serve import protocol
from tests.helpers.lease import lease

CODE = protocol.code_id()
SETTINGS: dict[str, Any] = {
    "collection": "notes",
    "model_dir": "/models/m",
    "model_name": "m",
    "max_chunk_size": 1500,
    "overlap_lines": 2,
    "ignore_files": [],
    "exclude": ["drafts/*"],
}
#: One good request per operation, as its client builds it.
GOOD: dict[str, dict[str, Any]] = {
    "search": {
        "op": "search",
        "collection": "notes",
        "model_dir": "/models/m",
        "model_name": "m",
        "query": "quokka",
        "top_k": 5,
        "source_prefix": None,
        "explain": False,
        "render": {"json_output": True, "digest": False, "budget": None, "min_score": 0.5},
    },
    "status": {"op": "status"},
    "watch.lease": {
        **SETTINGS,
        "op": "watch.lease",
        "roots": ["/notes"],
        "debounce_ms": 200,
        "holder": "session:1",
        "pid": None,
        "ttl": None,
    },
    "watch.release": {"op": "watch.release", "holder": "session:1", "roots": ["/notes"], "collection": "notes"},
    "watch.list": {"op": "watch.list"},
    "watch.follow": {
        **SETTINGS,
        "op": "watch.follow",
        "roots": ["/notes"],
        "debounce_ms": 200,
        "holder": "watch",
        "pid": 42,
        "description": "",
    },
    "index.run": {**SETTINGS, "op": "index.run", "paths": ["/notes"], "description": "", "force": True},
    "expand": {"op": "expand", "collection": "notes", "chunk_hash": "abc", "section": True, "lines": None},
    "stats": {"op": "stats", "collection": "notes"},
}


def stamped(body: dict[str, Any]) -> bytes:
    return protocol.encode(body)


def refused(line: bytes) -> dict[str, str]:
    got = protocol.read(line, CODE)
    assert isinstance(got, protocol.Refusal), got
    assert "\n" not in got.reason
    return dict(got.answer)


def test_every_operation_has_one_definition_and_a_good_request_reads_back_as_itself() -> None:
    assert set(GOOD) == set(protocol.OPERATIONS)
    for name, op in protocol.OPERATIONS.items():
        assert get_args(get_type_hints(op.request)["op"]) == (name,)  # the name its request carries
        got = protocol.read(stamped(GOOD[name]), CODE)
        assert got == {**GOOD[name], "v": protocol.VERSION, "code": CODE}, name
    assert {n for n, op in protocol.OPERATIONS.items() if op.streamed} == {"watch.follow", "index.run"}


def test_optional_fields_may_be_left_out_and_unknown_ones_are_ignored() -> None:
    for name, body in GOOD.items():
        required = protocol.OPERATIONS[name].request.__required_keys__
        least = {k: v for k, v in body.items() if k in required}
        assert not isinstance(protocol.read(stamped(least), CODE), protocol.Refusal), name
        assert not isinstance(protocol.read(stamped({**body, "later": 1}), CODE), protocol.Refusal), name


def test_the_lease_the_hooks_send_is_read_whatever_seconds_it_asks_for() -> None:
    """``ttl`` is read by :func:`leases.ttl_of`: anything but a number is the default, not an error."""
    body = lease(Path("/models/m"), Path("/notes"), "h", None)
    for ttl in (30, math.inf, "soon", None):
        assert not isinstance(protocol.read(stamped({**body, "ttl": ttl}), CODE), protocol.Refusal), ttl


def test_an_unknown_operation_is_refused_with_one_error_line() -> None:
    assert refused(stamped({"op": "watch.nope"})) == {"error": "unknown operation 'watch.nope'"}
    assert refused(stamped({"holder": "h"})) == {"error": "unknown operation None"}
    assert refused(stamped({"op": 7})) == {"error": "unknown operation 7"}


def test_a_missing_field_is_refused_naming_it() -> None:
    for name, op in protocol.OPERATIONS.items():
        for field in op.request.__required_keys__ - {"op"}:
            body = {k: v for k, v in GOOD[name].items() if k != field}
            assert refused(stamped(body)) == {"error": f"bad {name} request: missing {field!r}"}


@pytest.mark.parametrize(
    ("name", "field", "value", "said"),
    [
        ("search", "top_k", "5", "int"),
        ("search", "top_k", True, "int"),  # a bool is no count
        ("search", "query", None, "str"),
        ("search", "source_prefix", 3, "str or null"),
        ("search", "render", [], "an object"),
        ("watch.lease", "roots", "/notes", "a list of str"),
        ("watch.lease", "roots", ["/notes", 1], "a list of str"),
        ("watch.lease", "pid", "42", "int or null"),
        ("watch.release", "holder", 1, "str"),
        ("watch.follow", "max_chunk_size", 1.5, "int"),
        ("index.run", "force", "yes", "bool"),
        ("expand", "lines", 2.5, "int or null"),
        ("stats", "collection", ["notes"], "str"),
    ],
)
def test_a_field_of_the_wrong_type_is_refused_naming_it(name: str, field: str, value: object, said: str) -> None:
    line = stamped({**GOOD[name], field: value})
    assert refused(line) == {"error": f"bad {name} request: {field!r} is not {said}"}


def test_a_nested_field_of_the_wrong_type_is_named_with_its_object() -> None:
    line = stamped({**GOOD["search"], "render": {"budget": "lots"}})
    assert refused(line) == {"error": "bad search request: 'render': 'budget' is not int or null"}


def test_another_version_or_installation_is_unsupported_so_the_client_does_it_itself() -> None:
    body = GOOD["search"]
    for v in (2, None, True, "1"):
        line = json.dumps({**body, "v": v, "code": CODE}).encode() + b"\n"
        assert refused(line) == {"unsupported": "request"}, v
    other = json.dumps({**body, "v": protocol.VERSION, "code": "0.0:/elsewhere:1"}).encode()
    assert refused(other) == {"unsupported": "another installation of memsearch-fast"}
    # ...even for an operation this installation does not know: another may
    assert refused(json.dumps({"op": "later", "v": 2}).encode()) == {"unsupported": "request"}


@pytest.mark.parametrize(
    "line",
    [b"not json\n", b"\n", b"", b"\xff\xfe\n", b"[]\n", b'"search"\n', b"7\n", b"[" * 100_000 + b"\n"],
)
def test_a_line_that_is_no_request_object_is_one_error(line: bytes) -> None:
    assert set(refused(line)) == {"error"}


def test_a_request_past_the_limit_is_refused_unread() -> None:
    line = stamped({**GOOD["search"], "query": "x" * protocol.LINE_LIMIT})
    assert refused(line) == {"error": f"a request is at most {protocol.LINE_LIMIT} bytes"}


def test_the_detached_lease_helper_says_what_is_wrong_with_its_request(monkeypatch, capsys) -> None:
    from memsearch_fast.serve import client

    for junk, why in ((b"{", "not a JSON request"), (stamped(GOOD["status"]), "status is no lease")):
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(junk)))
        assert client.main(["lease", "/nowhere/m.db"]) == 2
        err = capsys.readouterr().err
        assert why in err and err.count("\n") == 1


# -- through a real service ----------------------------------------------------------------


def _exchange(path: str, line: bytes) -> list[bytes]:
    """The lines the service sends back before it closes the connection."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(10)
        s.connect(path)
        s.sendall(line)
        got = b""
        while part := s.recv(65536):
            got += part
    return got.splitlines(keepends=True)


@pytest.fixture
def service(short_tmp: Path):
    from memsearch_fast.serve.models import Models
    from memsearch_fast.serve.search import Service
    from memsearch_fast.serve.watchers import Registry

    svc = Service(str(short_tmp / "s.sock"), "unix:/nonexistent.sock", lambda: None)
    svc.watchers = Registry(str(short_tmp / "m.db"), Models(unload_after=60), touch=lambda: None).start()
    svc.start()
    try:
        yield svc
    finally:
        svc.stop()


def test_a_service_answers_a_bad_request_with_one_line_and_closes_cleanly(service) -> None:
    cases = [
        (stamped({"op": "nope"}), {"error": "unknown operation 'nope'"}),
        (stamped({**GOOD["watch.lease"], "roots": "/notes"}), None),
        (stamped({k: v for k, v in GOOD["index.run"].items() if k != "paths"}), None),  # streamed: not handed on
        (stamped({**GOOD["watch.follow"], "pid": "me"}), None),
        (b"not json\n", None),
        (b"[]\n", None),
        (json.dumps({**GOOD["search"], "v": 99}).encode() + b"\n", {"unsupported": "request"}),
    ]
    for line, want in cases:
        lines = _exchange(service.path, line)
        assert len(lines) == 1 and lines[0].endswith(b"\n"), (line[:60], lines)
        reply = json.loads(lines[0])
        if want is not None:
            assert reply == want
        else:
            assert set(reply) == {"error"}, reply
    # still serving, and a good request is answered as before
    [listed] = _exchange(service.path, stamped(GOOD["watch.list"]))
    assert json.loads(listed) == {"ok": True, "roots": [], "queue": 0, "index_runs": 0}
    [status] = _exchange(service.path, stamped(GOOD["status"]))
    assert json.loads(status)["roots"] == []


def test_the_in_process_entry_reads_its_request_too(service) -> None:
    assert service.handle({"op": "nope", "v": protocol.VERSION, "code": CODE}) == {"error": "unknown operation 'nope'"}
    assert service.handle([]) == {"error": "a request is one JSON object"}
    # a streamed operation needs its connection: the client does it itself
    assert service.handle({**GOOD["index.run"], "v": protocol.VERSION, "code": CODE}) == {"unsupported": "request"}


def _closed_by_server(sock: socket.socket) -> bool:
    """Whether the server closed *sock* (read within its timeout): an end of stream,
    or a reset where the server closed with bytes of ours unread (a dripping
    client's), as the kernel reports that."""
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def test_clients_that_send_nothing_or_drip_delay_no_other(service, monkeypatch) -> None:
    """Each connection's request is read in a thread of its own, by a deadline: a
    client that connects and says nothing, or sends a byte now and then, no longer
    holds every other search and lease renewal (10 s each, minutes for a drip)."""
    import threading
    import time

    from memsearch_fast.serve import search

    monkeypatch.setattr(search, "REQUEST_S", 2.0)
    idle = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    idle.connect(service.path)
    drip = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    drip.connect(service.path)
    stop = threading.Event()

    def dripping() -> None:
        line = stamped(GOOD["watch.list"])
        for i in range(len(line) - 1):  # never the end of the line
            if stop.wait(0.5):
                return
            with contextlib.suppress(OSError):
                drip.send(line[i : i + 1])

    threading.Thread(target=dripping, daemon=True).start()
    try:
        time.sleep(0.3)
        start = time.monotonic()
        [listed] = _exchange(service.path, stamped(GOOD["watch.list"]))
        assert json.loads(listed)["ok"] and time.monotonic() - start < 1.5
        # 200 clients at once: each is answered.
        many = []
        for _ in range(200):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(20)
            s.connect(service.path)
            many.append(s)
        for s in many:
            s.sendall(stamped(GOOD["watch.list"]))
        for s in many:
            assert json.loads(s.makefile("rb").readline())["ok"]
            s.close()
        # The silent and the dripping client are let go at their deadline.
        idle.settimeout(10)
        drip.settimeout(10)
        assert _closed_by_server(idle)
        assert _closed_by_server(drip)
    finally:
        stop.set()
        idle.close()
        drip.close()
