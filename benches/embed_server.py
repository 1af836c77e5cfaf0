"""A local OpenAI-compatible embedding server for the remote-path benchmarks.

Two kinds, both at ``POST /v1/embeddings`` and answering ``encoding_format``
``float`` or ``base64`` as OpenAI, vLLM, TEI and Infinity do:

- ``zero``: answers at once. Vectors are picked from a pool of precomputed,
  already encoded random unit vectors by a hash of the text, so the answer is
  deterministic per text and costs the server a JSON parse and a join: it
  measures what the client and the pipeline cost, not a model. ``--procs K``
  pre-forks K processes accepting on one socket.
- ``onnx``: the real int8 model through our ONNX provider in K worker
  processes (one single-threaded inference worker each) behind one threaded
  front, the shape of TEI or Infinity with K replicas.

    python -m benches.embed_server zero --port 8765 --procs 2
    python -m benches.embed_server onnx --port 8765 --procs 2 --model DIR

It prints ``ready <url>`` on stdout once it accepts requests.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import socket
import threading
import zlib
from concurrent.futures import ProcessPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

POOL = 4096  # distinct vectors of the zero-cost server
DIM = 384


def _pool(dim: int) -> tuple[list[bytes], list[bytes]]:
    """The zero-cost server's vectors, encoded once: float JSON and base64 JSON strings."""
    import numpy as np

    rng = np.random.default_rng(7)
    arr = rng.standard_normal((POOL, dim)).astype(np.float32)
    arr /= np.linalg.norm(arr, axis=1, keepdims=True)
    floats = [json.dumps(row.tolist()).encode() for row in arr]
    b64 = [b'"' + base64.b64encode(row.tobytes()) + b'"' for row in arr]
    return floats, b64


_MODEL: dict[str, Any] = {}  # the ONNX worker process's provider


def _load(model_dir: str) -> None:
    """Initializer of an ONNX worker process: one single-threaded inference worker."""
    from memsearch_fast.embeddings import get_provider

    _MODEL["provider"] = get_provider("onnx", model=model_dir, workers=1, threads=1)
    _embed(["warm up"])


def _embed(texts: list[str]) -> bytes:
    import asyncio

    import numpy as np

    vectors = asyncio.run(_MODEL["provider"].embed(texts))
    return np.asarray(vectors, dtype=np.float32).tobytes()


def _answer(model: str, encoded: list[bytes]) -> bytes:
    items = b",".join(b'{"object":"embedding","index":%d,"embedding":%s}' % (i, e) for i, e in enumerate(encoded))
    usage = b'"usage":{"prompt_tokens":0,"total_tokens":0}'
    return b'{"object":"list","model":%s,"data":[%s],%s}' % (json.dumps(model).encode(), items, usage)


def make_handler(encode: Any) -> type[BaseHTTPRequestHandler]:
    """A handler whose ``encode(texts, base64: bool) -> list[bytes]`` builds each item's embedding."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as a client's connection pool expects

        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            body = json.loads(self.rfile.read(length) or b"{}")
            if self.path != "/v1/embeddings" or not isinstance(body.get("input"), list):
                return self._reply(404, b'{"error":{"message":"no such endpoint"}}')
            texts = body["input"]
            encoded = encode(texts, body.get("encoding_format") == "base64")
            return self._reply(200, _answer(str(body.get("model", "")), encoded))

        def _reply(self, status: int, data: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return Handler


def serve_zero(sock: socket.socket, procs: int) -> None:
    floats, b64 = _pool(DIM)

    def encode(texts: list[str], as_b64: bool) -> list[bytes]:
        table = b64 if as_b64 else floats
        return [table[zlib.crc32(t.encode("utf-8", "surrogatepass")) % POOL] for t in texts]

    children = []
    for _ in range(procs - 1):
        pid = os.fork()
        if pid == 0:
            _serve(sock, encode)
            os._exit(0)
        children.append(pid)
    _serve(sock, encode, ready=True)


def serve_onnx(sock: socket.socket, procs: int, model_dir: str) -> None:
    import numpy as np

    pool = ProcessPoolExecutor(procs, initializer=_load, initargs=(model_dir,))
    list(pool.map(len, [[0]] * procs))  # every worker started and its model loaded

    def encode(texts: list[str], as_b64: bool) -> list[bytes]:
        arr = np.frombuffer(pool.submit(_embed, texts).result(), dtype=np.float32).reshape(len(texts), -1)
        if as_b64:
            return [b'"' + base64.b64encode(row.tobytes()) + b'"' for row in arr]
        return [json.dumps(row.tolist()).encode() for row in arr]

    _serve(sock, encode, ready=True)


def _serve(sock: socket.socket, encode: Any, ready: bool = False) -> None:
    httpd = ThreadingHTTPServer(sock.getsockname(), make_handler(encode), bind_and_activate=False)
    httpd.socket.close()
    httpd.socket = sock
    httpd.daemon_threads = True
    if ready:
        host, port = sock.getsockname()[:2]
        print(f"ready http://{host}:{port}/v1", flush=True)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    threading.Event().wait()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("kind", choices=("zero", "onnx"))
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--procs", type=int, default=1)
    ap.add_argument("--model", default="")
    args = ap.parse_args(argv)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", args.port))
    sock.listen(128)
    if args.kind == "zero":
        serve_zero(sock, max(1, args.procs))
    else:
        serve_onnx(sock, max(1, args.procs), args.model)


if __name__ == "__main__":
    main()
