"""numpy arrays <-> Open Inference Protocol tensors.

Tensors travel as raw bytes (``raw_input_contents`` / ``raw_output_contents``): row-major, no padding, in the
numpy dtype of the protocol's datatype. BYTES tensors use the length-prefixed layout Triton and MLServer use in
raw contents: each element is a 4-byte little-endian length followed by its bytes. Typed ``contents`` are
decoded too, because third-party servers may answer with them.
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np

from mlharness.errors import AgentError

# manifest element_type -> protocol datatype
DATATYPES: dict[str, str] = {
    "bool": "BOOL", "uint8": "UINT8", "uint16": "UINT16", "uint32": "UINT32", "uint64": "UINT64",
    "int8": "INT8", "int16": "INT16", "int32": "INT32", "int64": "INT64",
    "float16": "FP16", "float32": "FP32", "float64": "FP64", "bfloat16": "BF16", "bytes": "BYTES",
}
_NUMPY: dict[str, np.dtype] = {
    dt: np.dtype(et) for et, dt in DATATYPES.items() if et not in ("bytes", "bfloat16")
}
_DATATYPE_OF_NUMPY: dict[np.dtype, str] = {np_dtype: dt for dt, np_dtype in _NUMPY.items()}
# which typed-contents field carries each datatype (FP16/BF16 only travel raw)
_CONTENTS_FIELD = {
    "BOOL": "bool_contents", "INT8": "int_contents", "INT16": "int_contents", "INT32": "int_contents",
    "INT64": "int64_contents", "UINT8": "uint_contents", "UINT16": "uint_contents", "UINT32": "uint_contents",
    "UINT64": "uint64_contents", "FP32": "fp32_contents", "FP64": "fp64_contents", "BYTES": "bytes_contents",
}
DYNAMIC = -1
MAX_ELEMENTS = 1 << 34  # more elements than any message can carry: a declared shape beyond it is bogus


def element_count(shape: list[int], what: str) -> int:
    """Elements of a tensor of this (concrete) shape; a negative dim or an absurd size is INVALID_ARGUMENT."""
    count = 1
    for d in shape:
        if d < 0:
            raise AgentError(f"{what}: shape {list(shape)} has a negative dimension", "INVALID_ARGUMENT")
        count *= int(d)
        if count > MAX_ELEMENTS:
            raise AgentError(f"{what}: shape {list(shape)[:8]}{'...' if len(shape) > 8 else ''} declares more "
                             f"than {MAX_ELEMENTS} elements", "INVALID_ARGUMENT")
    return count


def datatype_of(element_type: str) -> str:
    try:
        return DATATYPES[element_type]
    except KeyError:
        raise AgentError(f"element type '{element_type}' has no Open Inference Protocol datatype") from None


def numpy_of(datatype: str) -> np.dtype:
    if datatype == "BYTES":
        return np.dtype(object)
    try:
        return _NUMPY[datatype]
    except KeyError:
        raise AgentError(f"unsupported tensor datatype '{datatype}'", "INVALID_ARGUMENT") from None


def datatype_of_array(a: np.ndarray) -> str:
    if a.dtype == object or a.dtype.kind in "SU":
        return "BYTES"
    dt = _DATATYPE_OF_NUMPY.get(a.dtype)
    if dt is not None:
        return dt
    raise AgentError(f"arrays of dtype {a.dtype} cannot be sent over the Open Inference Protocol")


def spec_shape(shape: list[Any] | None) -> list[int]:
    """A manifest shape (per sample) as protocol dims: names and -1 are dynamic."""
    return [int(d) if isinstance(d, int) and d > 0 else DYNAMIC for d in (shape or [])]


def per_sample_bytes(specs: list[dict[str, Any]]) -> int | None:
    """Bytes of one sample across these tensor specs, or None when a dim or the datatype has no fixed size."""
    total = 0
    for spec in specs:
        dims = spec_shape(spec.get("shape"))
        et = spec.get("element_type", "float32")
        if et in ("bytes",) or any(d == DYNAMIC for d in dims) or spec.get("shape") is None:
            return None
        total += int(np.prod(dims, dtype=np.int64)) * np.dtype("uint16" if et == "bfloat16" else et).itemsize
    return total


def encode_bytes(items: list[bytes] | np.ndarray) -> bytes:
    """BYTES elements in the length-prefixed raw layout."""
    parts = []
    for item in items:
        b = item if isinstance(item, bytes) else (item.encode() if isinstance(item, str) else bytes(item))
        parts.append(struct.pack("<I", len(b)))
        parts.append(b)
    return b"".join(parts)


def decode_bytes(raw: bytes, count: int) -> list[bytes]:
    out: list[bytes] = []
    pos = 0
    view = memoryview(raw)
    for _ in range(count):
        if pos + 4 > len(raw):
            raise AgentError(f"BYTES tensor is truncated: {count} elements expected", "INVALID_ARGUMENT")
        (n,) = struct.unpack_from("<I", raw, pos)
        pos += 4
        if pos + n > len(raw):
            raise AgentError(f"BYTES tensor is truncated: element of {n} bytes past the end", "INVALID_ARGUMENT")
        out.append(bytes(view[pos:pos + n]))
        pos += n
    if pos != len(raw):
        raise AgentError("BYTES tensor has trailing data", "INVALID_ARGUMENT")
    return out


def to_raw(a: np.ndarray | list[bytes]) -> tuple[str, list[int], bytes]:
    """(datatype, shape, raw bytes) of an array, or of a list of bytes (a 1-D BYTES tensor)."""
    if isinstance(a, list | tuple):
        return "BYTES", [len(a)], encode_bytes(list(a))
    dt = datatype_of_array(a)
    if dt == "BYTES":
        return dt, list(a.shape), encode_bytes(a.reshape(-1).tolist())
    return dt, list(a.shape), np.ascontiguousarray(a).tobytes()


def from_raw(datatype: str, shape: list[int], raw: bytes, what: str) -> np.ndarray:
    count = element_count(shape, what)
    if datatype == "BYTES":
        arr = np.empty(count, dtype=object)
        arr[:] = decode_bytes(raw, count)
        return arr.reshape(shape)
    dtype = numpy_of(datatype)
    if len(raw) != count * dtype.itemsize:
        raise AgentError(f"{what}: {len(raw)} bytes of raw contents for a {datatype} tensor of shape {shape} "
                         f"({count * dtype.itemsize} expected)", "INVALID_ARGUMENT")
    # zero copy: the array reads the message's buffer (read-only)
    return np.frombuffer(raw, dtype=dtype).reshape(shape)


def from_contents(datatype: str, shape: list[int], contents: Any, what: str) -> np.ndarray:
    field = _CONTENTS_FIELD.get(datatype)
    if field is None:
        raise AgentError(f"{what}: {datatype} tensors must use raw contents", "INVALID_ARGUMENT")
    values = getattr(contents, field)
    count = element_count(shape, what)
    if len(values) != count:
        raise AgentError(f"{what}: {len(values)} values for shape {shape}", "INVALID_ARGUMENT")
    if datatype == "BYTES":
        arr = np.empty(count, dtype=object)
        arr[:] = list(values)
        return arr.reshape(shape)
    return np.asarray(values, dtype=numpy_of(datatype)).reshape(shape)


def dims_match(declared: list[int], actual: list[int]) -> bool:
    """Shape compatibility: -1 on either side matches any size."""
    return len(declared) == len(actual) and all(
        d == DYNAMIC or a == DYNAMIC or d == a for d, a in zip(declared, actual, strict=True))
