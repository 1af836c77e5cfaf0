"""The far end of :mod:`tests.helpers.reference`: runs in the reference's own Python.

Standard library only (it imports ``memsearch`` from its environment). One JSON
request per line on stdin, one JSON answer per line on the original stdout;
anything the reference prints goes to stderr, so it cannot break the answers.

A request is ``{"call": "module:attr.path", "args": [...], "kwargs": {...}}``
or ``{"exec": CODE, "values": {...}}`` (the answer is the ``result`` that CODE
leaves). The answer is ``{"ok": value}`` or ``{"error": type name, "message",
"traceback"}``. Paths travel as ``{"__path__": str}``; objects come back as
``{"__object__": type name, "attrs": {field or property: value}}``.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import pathlib
import sys
import traceback
from typing import Any


def decode(value: Any) -> Any:
    if isinstance(value, dict):
        if set(value) == {"__path__"}:
            return pathlib.Path(value["__path__"])
        return {k: decode(v) for k, v in value.items()}
    if isinstance(value, list):
        return [decode(v) for v in value]
    return value


def _attrs(value: Any) -> dict[str, Any]:
    if dataclasses.is_dataclass(value):
        names = [f.name for f in dataclasses.fields(value)]
    else:
        names = [k for k in getattr(value, "__dict__", {}) if not k.startswith("_")]
    names += [k for k, v in vars(type(value)).items() if isinstance(v, property) and not k.startswith("_")]
    return {name: encode(getattr(value, name)) for name in names}


def encode(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, pathlib.PurePath):
        return str(value)
    if isinstance(value, (list, tuple)):
        return [encode(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted(encode(v) for v in value)
    if isinstance(value, dict):
        return {str(k): encode(v) for k, v in value.items()}
    if isinstance(value, bytes):
        return value.decode("utf-8", "surrogateescape")
    return {"__object__": type(value).__name__, "attrs": _attrs(value)}


def handle(request: dict[str, Any]) -> Any:
    if "call" in request:
        module, _, path = request["call"].partition(":")
        target: Any = importlib.import_module(module)
        for part in path.split("."):
            target = getattr(target, part)
        return target(*decode(request.get("args", [])), **decode(request.get("kwargs", {})))
    namespace: dict[str, Any] = dict(decode(request.get("values", {})))
    exec(request["exec"], namespace)
    return namespace.get("result")


def main() -> None:
    answers = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)  # the reference's own prints land on stderr
    sys.stdout = sys.stderr
    for line in sys.stdin:
        try:
            reply: dict[str, Any] = {"ok": encode(handle(json.loads(line)))}
        except BaseException as exc:  # noqa: BLE001 - every failure is the caller's answer
            reply = {"error": type(exc).__name__, "message": str(exc), "traceback": traceback.format_exc()}
        answers.write(json.dumps(reply) + "\n")
        answers.flush()


if __name__ == "__main__":
    main()
