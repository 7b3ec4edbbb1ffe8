"""Curation as in ObjectCompose: keep the samples every model of an ensemble classifies correctly on clean data.

Optionally also require an object mask covering at least ``min_mask_fraction`` of the image. The
result is an id list (one id per line, with a header comment) that a spec uses as ``ids: FILE``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ..errors import ShiftbenchError
from ..registry import MODELS


def curate(
    dataset: str,
    models: Sequence[str],
    out: str | os.PathLike | None = None,
    batch_size: int = 32,
    min_mask_fraction: float | None = None,
    limit: int | None = None,
    progress: bool = False,
) -> dict[str, Any]:
    """Ids of the samples that every model gets right (top-1) and that pass the mask filter."""
    from ..datasets import load
    from .labels import plan_labels

    if not models:
        raise ShiftbenchError("curate needs at least one model")
    data = load(dataset, limit=limit)
    nets = []
    plans = []
    for name in models:
        model = MODELS.create(name)
        if getattr(model, "task", None) != "classification":
            raise ShiftbenchError(f"curate needs classifiers; {name!r} is a {getattr(model, 'task', '?')} model")
        plan = plan_labels(model, data, dataset_name=f"dataset {dataset!r}")  # refuses before any work
        plans.append(plan)
        nets.append(plan.model)
    kept: list[str] = []
    dropped = {"wrong": 0, "mask": 0, "unlabelled": 0}
    for start in range(0, len(data), batch_size):
        samples = [data.load(i) for i in range(start, min(start + batch_size, len(data)))]
        ok = np.ones(len(samples), bool)
        labels = np.array([-1 if s.label is None else s.label for s in samples])
        dropped["unlabelled"] += int((labels < 0).sum())
        ok &= labels >= 0
        for model, plan in zip(nets, plans):
            pred = model.predict_logits([s.image for s in samples]).argmax(axis=1)
            # the dataset's labels in this model's output space (identity unless the plan maps them)
            mapped = np.array([-1 if s.label is None else s.label for s in plan.targets(samples)])
            wrong = ok & (pred != mapped)
            dropped["wrong"] += int(wrong.sum())
            ok &= ~wrong
        if min_mask_fraction is not None:
            for i, s in enumerate(samples):
                if ok[i] and (s.mask is None or float((np.asarray(s.mask) > 0).mean()) < min_mask_fraction):
                    ok[i] = False
                    dropped["mask"] += 1
        kept += [s.id for s, k in zip(samples, ok) if k]
    summary = {"dataset": dataset, "models": list(models), "total": len(data), "kept": len(kept),
               "dropped": dropped, "ids": kept}
    if out is not None:
        out = Path(out)
        if not out.parent.exists():
            raise ShiftbenchError(f"{out}: folder {out.parent} does not exist")
        header = (f"# shiftbench curate: dataset {dataset}, models {', '.join(models)}, "
                  f"kept {len(kept)} of {len(data)}"
                  + (f", min mask fraction {min_mask_fraction}" if min_mask_fraction is not None else "") + "\n")
        tmp = out.with_name(out.name + ".part")
        tmp.write_text(header + "".join(f"{i}\n" for i in kept), encoding="utf-8")
        tmp.replace(out)
    return summary
