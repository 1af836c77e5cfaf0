"""Writing a safetensors checkpoint by hand, as the hub's model files are laid out."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np


def write_safetensors(path: Path, tensors: dict[str, np.ndarray], dtypes: dict[str, str] | None = None) -> None:
    """Minimal safetensors writer (header length, JSON header, raw little-endian data)."""
    codes = {np.dtype("<f4"): "F32", np.dtype("<f2"): "F16", np.dtype("<i8"): "I64", np.dtype("<u2"): "BF16"}
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    blobs, offset = [], 0
    for name, tensor in tensors.items():
        arr = np.ascontiguousarray(tensor)
        raw = arr.tobytes()
        code = (dtypes or {}).get(name) or codes[arr.dtype]
        header[name] = {"dtype": code, "shape": list(arr.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    head = json.dumps(header).encode()
    head += b" " * (-len(head) % 8)
    path.write_bytes(struct.pack("<Q", len(head)) + head + b"".join(blobs))
