"""The store's codecs: a metric's state as JSON for the ``batches`` table, and back; and the compact
encoding of per-sample values and their id lists for the ``samples`` and ``sample_ids`` tables.

Arrays keep their dtype and shape, non-finite floats, tuples, dicts with non-string keys and dataclasses
are tagged, so a state read back equals the one written. A dataclass is named by ``"module:qualname"``
and rebuilt only when it is one of shiftbench's own: decoding imports that module and calls the class
with the stored fields, nothing else is executed.

>>> import numpy as np
>>> encode_state({"n": np.int64(3), "hist": np.array([1, 2], np.uint8), "pair": (1.0, float("nan"))})
{'n': 3, 'hist': {'__nd__': [1, 2], 'dtype': 'uint8', 'shape': [2]}, 'pair': {'__tuple__': [1.0, {'__float__': 'nan'}]}}
>>> decode_state(encode_state((np.arange(4).reshape(2, 2), {1: "a"})))
(array([[0, 1],
       [2, 3]]), {1: 'a'})
"""

from __future__ import annotations

import hashlib
import io
import json
import zlib
from typing import Any

import numpy as np

from ..errors import ShiftbenchError

__all__ = ["encode_state", "decode_state", "encode_ids", "decode_ids", "ids_digest", "pack_ids", "encode_values", "decode_values",
           "narrowest"]


def encode_state(value: Any) -> Any:
    """A metric's attributes as JSON: arrays keep dtype and shape, dataclasses and tuples are tagged."""
    import dataclasses

    if isinstance(value, np.ndarray):
        return {"__nd__": value.tolist() if value.dtype != object else [encode_state(v) for v in value],
                "dtype": str(value.dtype), "shape": list(value.shape)}
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, float) and not np.isfinite(value):
        return {"__float__": repr(value)}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        cls = type(value)
        return {"__dc__": f"{cls.__module__}:{cls.__qualname__}",
                "fields": {f.name: encode_state(getattr(value, f.name)) for f in dataclasses.fields(value)}}
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            return {"__items__": [[encode_state(k), encode_state(v)] for k, v in value.items()]}
        return {k: encode_state(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return {"__tuple__": [encode_state(v) for v in value]}
    if isinstance(value, list):
        return [encode_state(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise ShiftbenchError(f"cannot save metric state of type {type(value).__name__}")


_STATE_CLASSES = ("shiftbench.",)  # only shiftbench dataclasses are rebuilt from a store


def decode_state(value: Any) -> Any:
    """Inverse of encode_state (rebuilds only shiftbench's own dataclasses; nothing is executed)."""
    import importlib

    if isinstance(value, list):
        return [decode_state(v) for v in value]
    if isinstance(value, dict):
        if "__nd__" in value:
            dtype = np.dtype(value["dtype"])
            if dtype == object:
                arr = np.empty(len(value["__nd__"]), dtype=object)
                arr[:] = [decode_state(v) for v in value["__nd__"]]
                return arr.reshape(value["shape"])
            return np.asarray(value["__nd__"], dtype=dtype).reshape(value["shape"])
        if "__float__" in value:
            return float(value["__float__"])
        if "__tuple__" in value:
            return tuple(decode_state(v) for v in value["__tuple__"])
        if "__items__" in value:
            return {decode_state(k): decode_state(v) for k, v in value["__items__"]}
        if "__dc__" in value:
            module, _, qualname = value["__dc__"].partition(":")
            if not module.startswith(_STATE_CLASSES):
                raise ShiftbenchError(f"store holds a state of foreign type {value['__dc__']!r}")
            cls = getattr(importlib.import_module(module), qualname)
            return cls(**{k: decode_state(v) for k, v in value["fields"].items()})
        return {k: decode_state(v) for k, v in value.items()}
    return value


# -- per-sample values (the samples and sample_ids tables, schema 2) ----------------------------------
_NPY_MAGIC = b"\x93NUMPY"  # schema 1's values: plain float64 .npy bytes; schema 2's are zlib streams of .npy


def encode_ids(ids: Any) -> tuple[str, bytes]:
    """A list of sample ids as (its digest, its JSON): every id a string, non-ASCII escaped (so any text, lone
    surrogates included, round-trips), the text schema 1 stored; the digest is the SHA-256 of that JSON, so
    equal lists share one stored copy (:func:`pack_ids` compresses it for the ``sample_ids`` table).

    >>> digest, text = encode_ids(["a", "b"])
    >>> text, decode_ids(pack_ids(text)), digest[:12]
    (b'["a","b"]', ['a', 'b'], '0473ef2dc0d3')
    """
    text = json.dumps([str(i) for i in ids], separators=(",", ":")).encode("ascii")
    return ids_digest(text), text


def ids_digest(text: bytes) -> str:
    """The key of an id list's JSON (:func:`encode_ids`) in the ``sample_ids`` table."""
    return hashlib.sha256(text).hexdigest()


def pack_ids(text: bytes) -> bytes:
    """An id list's JSON as the ``sample_ids`` table stores it (zlib)."""
    return zlib.compress(text, 9)


def decode_ids(data: bytes | str) -> list[str]:
    """The id list of :func:`pack_ids`'s bytes, or of schema 1's JSON text (stored in ``samples.ids``)."""
    text = data if isinstance(data, str) else zlib.decompress(data)
    ids = json.loads(text)
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        raise ValueError("sample ids are not a list of strings")
    return ids


def narrowest(values: Any) -> np.ndarray:
    """``values`` (as float64) in the narrowest dtype that gives back every float64 bit for bit: uint8 when
    they are all whole numbers 0..255 (0/1 correctness), else float32 when each survives the float32 round
    trip, else float64. -0.0 and NaN payloads count: a value is narrowed only when its bits come back.

    >>> narrowest([0.0, 1.0, 1.0]).dtype, narrowest([0.5, 0.25]).dtype, narrowest([0.1]).dtype
    (dtype('uint8'), dtype('float32'), dtype('float64'))
    """
    wide = np.ascontiguousarray(values, dtype=np.float64)
    bits = wide.view(np.uint64)
    for dtype in (np.uint8, np.float32):
        with np.errstate(invalid="ignore", over="ignore"):
            narrow = wide.astype(dtype)
            back = narrow.astype(np.float64)
        if np.array_equal(back.view(np.uint64), bits):
            return narrow
    return wide


def encode_values(values: Any) -> bytes:
    """Per-sample values as stored (schema 2): :func:`narrowest` of them as ``.npy`` bytes (no pickles),
    zlib-compressed. Lossless: :func:`decode_values` gives back the float64 values bit for bit."""
    buffer = io.BytesIO()
    np.save(buffer, narrowest(values), allow_pickle=False)
    return zlib.compress(buffer.getvalue(), 6)


def decode_values(data: bytes, dtype: Any = np.float64) -> np.ndarray:
    """The values of :func:`encode_values`'s bytes, or of schema 1's float64 ``.npy`` bytes, as ``dtype``
    (float64, what was written; None: the stored dtype, uint8 / float32 / float64, read without a copy)."""
    raw = data if data[:len(_NPY_MAGIC)] == _NPY_MAGIC else zlib.decompress(data)
    array = np.load(io.BytesIO(raw), allow_pickle=False)
    if array.dtype not in (np.uint8, np.float32, np.float64):
        raise ValueError(f"per-sample values of dtype {array.dtype}")
    return array if dtype is None else array.astype(dtype, copy=False)
