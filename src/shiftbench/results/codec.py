"""The metric-state codec: a metric's state as JSON for the store's ``batches`` table, and back.

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

from typing import Any

import numpy as np

from ..errors import ShiftbenchError

__all__ = ["encode_state", "decode_state"]


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
