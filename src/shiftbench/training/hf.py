"""A Hugging Face ``datasets`` helper: ``ds.set_transform(hf_transform(policy, task=...))`` shifts rows on the fly.

``datasets`` hands ``set_transform`` a batch (a dict of lists) and nothing else: no row index, no epoch.
The choice for each row is therefore keyed by ``id_column`` when given (an int column such as the one
``ds.add_column("idx", range(len(ds)))`` adds keys the row exactly as ShiftDataset keys index i; a str
column is used as the row's sample id), and otherwise by the content id of the row's image (a digest of
its pixels: stable across processes and workers, but two identical images get the same shift). The
epoch is ``set_epoch(e)``'s, shared with DataLoader workers as in ShiftDataset.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Mapping

from ..errors import ShiftbenchError
from .policy import ShiftPolicy
from .transform import ShiftTransform

__all__ = ["hf_transform", "HFShiftTransform"]


@dataclass(frozen=True)
class Columns:
    """The columns an ``hf_transform`` reads and writes (see there; None: none), checked once."""

    image_column: str = "image"
    label_column: str | None = "label"
    mask_column: str | None = None
    id_column: str | None = None
    record_column: str | None = None

    def __post_init__(self) -> None:
        for name, value in vars(self).items():
            if value is not None and (not isinstance(value, str) or not value):
                raise ShiftbenchError(f"hf_transform: {name} must be a column name, got {value!r}")
        if self.image_column is None:
            raise ShiftbenchError("hf_transform: image_column must be a column name, got None")


class HFShiftTransform:
    """The callable ``hf_transform`` returns (see there); ``set_epoch(e)`` changes the epoch."""

    def __init__(self, policy: ShiftPolicy, *, task: str, seed: int = 0, epoch: int = 0, **columns: Any):
        vars(self).update(vars(Columns(**columns)))  # the checked names as attributes: image_column, label_column...
        self.transform = ShiftTransform(policy, task=task, seed=seed, epoch=epoch)

    @property
    def epoch(self) -> int:
        return self.transform.epoch

    def set_epoch(self, epoch: int) -> None:
        self.transform.set_epoch(epoch)

    def __call__(self, batch: Mapping[str, list]) -> dict[str, list]:
        for column in (self.image_column, self.mask_column, self.id_column):
            if column is not None and column not in batch:
                raise ShiftbenchError(f"hf_transform: no column {column!r} in the batch (columns: "
                                      f"{', '.join(batch)}); set_transform(..., columns=) may have left it out")
        out = {key: list(values) for key, values in batch.items()}
        records = []
        for r in range(len(out[self.image_column])):
            row: dict[str, Any] = {"image": out[self.image_column][r]}
            if self.label_column is not None and self.label_column in out:
                row["label"] = out[self.label_column][r]
            if self.mask_column is not None:
                row["mask"] = out[self.mask_column][r]
            index = None
            if self.id_column is not None:
                key = out[self.id_column][r]
                row["id"] = str(key)
                index = key if isinstance(key, int) and not isinstance(key, bool) else None
            shifted, record = self.transform.augment(row, index=index)
            out[self.image_column][r] = shifted["image"]
            if self.mask_column is not None:
                out[self.mask_column][r] = shifted["mask"]
            records.append(json.dumps(record, sort_keys=True))
        if self.record_column is not None:
            out[self.record_column] = records
        return out

    def __repr__(self) -> str:
        return f"hf_transform({self.transform.policy!r}, task={self.transform.task!r}, seed={self.transform.seed})"


def hf_transform(policy: ShiftPolicy, *, task: str, seed: int = 0, epoch: int = 0, **columns: Any) -> HFShiftTransform:
    """A function for ``datasets.Dataset.set_transform``: a batch (dict of lists) in, the same columns out with
    ``image_column`` shifted (PIL in, PIL out; arrays stay arrays). The ``columns`` (:class:`Columns`):

    ``label_column``: the class index, handed to shifts that read it (None: none). ``mask_column``: the object
    mask (a PIL "L" image or an array; needed by background and attribute shifts). ``id_column``: what keys
    the choice of each row (see the module docstring; default: the image's content id).
    ``record_column``: add a column with each row's record (JSON) under this name. Other columns (boxes,
    captions) pass through unchanged: every shift the task allows keeps them valid.
    """
    return HFShiftTransform(policy, task=task, seed=seed, epoch=epoch, **columns)
