"""Reading a safetensors file's header with the standard library alone: its framing checked, its metadata returned,
no tensor loaded and nothing unpickled (for files a peer sent or a server publishes). :func:`canonical_header`
rewrites a header with sorted keys, so that the same tensors and metadata always give the same bytes (safetensors
writes its metadata map in a random order per call).
"""

from __future__ import annotations

import json
import math
import struct

__all__ = ["SafetensorsError", "safetensors_metadata", "canonical_header"]

_MAX_HEADER_BYTES = 10_000_000
_DTYPE_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1}


class SafetensorsError(ValueError):
    """A file that is not a well-formed safetensors file."""


def safetensors_metadata(data: bytes) -> dict[str, str]:
    """The ``__metadata__`` of a safetensors file's header, after checking its framing: a JSON header whose tensors
    (known dtypes, shapes of non-negative ints) fill the data section exactly, in order. :class:`SafetensorsError`
    names what is wrong."""
    if len(data) < 8:
        raise SafetensorsError(f"{len(data)} bytes is too short for a safetensors file")
    (size,) = struct.unpack("<Q", data[:8])
    if size > min(len(data) - 8, _MAX_HEADER_BYTES):
        raise SafetensorsError(f"the safetensors header declares {size} bytes; the file has {len(data) - 8} after it")
    try:
        header = json.loads(data[8 : 8 + size].decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise SafetensorsError(f"the safetensors header is not JSON: {exc}") from None
    if not isinstance(header, dict):
        raise SafetensorsError("the safetensors header is not a JSON object")
    meta = header.pop("__metadata__", None) or {}
    if not isinstance(meta, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in meta.items()):
        raise SafetensorsError("the safetensors metadata is not a map of strings")
    spans = []
    for name, entry in header.items():
        try:
            width = _DTYPE_BYTES[entry["dtype"]]
            shape, (start, end) = entry["shape"], entry["data_offsets"]
            ok = all(isinstance(n, int) and n >= 0 for n in [*shape, start, end])
        except (KeyError, TypeError, ValueError):
            raise SafetensorsError(f"safetensors tensor {name!r} has no valid dtype, shape and data_offsets") from None
        if not ok or end - start != width * math.prod(shape):
            raise SafetensorsError(f"safetensors tensor {name!r}: its offsets do not fit its dtype and shape")
        spans.append((start, end))
    position = 0
    for start, end in sorted(spans):
        if start != position:
            raise SafetensorsError("the safetensors tensors do not tile the data section (a gap or an overlap)")
        position = end
    if position != len(data) - 8 - size:
        raise SafetensorsError(
            f"the safetensors tensors hold {position} bytes; the data section has {len(data) - 8 - size}"
        )
    return meta


def canonical_header(data: bytes) -> bytes:
    """A safetensors file with its JSON header's keys sorted (padded with spaces to a multiple of 8 bytes, as
    safetensors pads it); the tensors' offsets are relative to the data, which is unchanged."""
    (size,) = struct.unpack("<Q", data[:8])
    header = json.dumps(json.loads(data[8 : 8 + size].decode("utf-8")), sort_keys=True, separators=(",", ":"))
    text = header.encode("utf-8")
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data[8 + size :]
