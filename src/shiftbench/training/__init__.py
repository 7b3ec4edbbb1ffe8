"""Shifts as training-time augmentation: a sampling policy, a v2-style transform, a torch Dataset, a HF helper.

>>> import shiftbench as sb
>>> from shiftbench.training import ShiftPolicy, ShiftTransform
>>> policy = ShiftPolicy(["gaussian_noise", ("background_color", {"color": "red"})], p=0.5, weights=[1, 2])
>>> transform = ShiftTransform(policy, task="segmentation")
>>> sample = sb.load_dataset("objects", size=64).load(0)
>>> out = transform(sample, index=0)          # a Sample in, a Sample out; mask and boxes kept
>>> bool((out.mask == sample.mask).all())
True

``ShiftDataset``, ``collate`` and ``to_tensors`` need torch and are imported on first use, so importing this
package does not import torch. Seeding contract, refusals and costs: docs/training.md.
"""

from __future__ import annotations

from typing import Any

from .hf import HFShiftTransform, hf_transform
from .policy import TASK_NEEDS, Choice, PolicyEntry, ShiftPolicy, parse_severities
from .transform import SharedEpoch, ShiftTransform

__all__ = ["ShiftPolicy", "PolicyEntry", "Choice", "TASK_NEEDS", "parse_severities", "ShiftTransform", "SharedEpoch",
           "ShiftDataset", "collate", "to_tensors", "hf_transform", "HFShiftTransform"]

_TORCH_NAMES = ("ShiftDataset", "collate", "to_tensors")


def __getattr__(name: str) -> Any:
    if name in _TORCH_NAMES:  # these import torch; load them only when asked for
        from . import torch_data  # deferred: start-up cost (pulls torch)

        return getattr(torch_data, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
