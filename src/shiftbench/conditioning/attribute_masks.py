"""Pascal-EA curation of edit masks: keep the single largest object when it covers enough of the image.

>>> import numpy as np
>>> inst = np.zeros((10, 10), np.int64); inst[:5, :5] = 1; inst[6:, 6:] = 2
>>> largest_object(inst).sum(), largest_object(inst, min_fraction=0.3) is None
(np.int64(25), True)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import ShiftbenchError

__all__ = ["largest_object"]


def largest_object(mask: Any, min_fraction: float = 0.1, ignore_index: int | None = 255) -> np.ndarray | None:
    """The largest object of ``mask`` as a bool map, or None when it covers less than ``min_fraction``.

    An integer map is read as instances (0 = background, ``ignore_index`` = void, as in Pascal VOC);
    a bool map is split into 8-connected components. The paper keeps an image only when its single
    largest salient object covers at least 10 % of it.
    """
    import cv2

    m = np.asarray(mask)
    if m.ndim != 2:
        raise ShiftbenchError(f"largest_object needs an HxW mask, got shape {m.shape}")
    if not 0 <= float(min_fraction) <= 1:
        raise ShiftbenchError(f"min_fraction must lie in [0, 1], got {min_fraction}")
    if m.dtype == np.bool_:
        _, labels = cv2.connectedComponents(m.astype(np.uint8), connectivity=8)
    elif np.issubdtype(m.dtype, np.integer):
        labels = np.where(m == ignore_index, 0, m) if ignore_index is not None else m
    else:
        raise ShiftbenchError(f"largest_object needs a bool or integer mask, got {m.dtype}")
    labels = labels.astype(np.int64)
    if labels.min() < 0:
        raise ShiftbenchError("instance ids must be non-negative")
    counts = np.bincount(labels.ravel())
    counts[0] = 0
    if counts.max(initial=0) == 0:
        return None
    best = int(counts.argmax())  # ties go to the lowest id: deterministic
    if counts[best] < min_fraction * m.size:
        return None
    return labels == best
