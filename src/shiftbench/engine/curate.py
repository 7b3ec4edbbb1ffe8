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
from ..datasets import Subset, load
from ..files import write_atomic
from ..registry import MODELS
from ..tasks.labels import plan_labels
from .kernel import CLEAN, Loader, spec_loader
from .progress import RunProgress


def curated_indices(data: Any, models: dict[str, tuple[Any, Any]], batch_size: int = 32,
                    min_mask_fraction: float | None = None, progress: Any = None,
                    loader: Loader | None = None) -> tuple[list[int], dict[str, Any]]:
    """Indices of ``data`` whose sample every model classifies correctly (top-1) on clean, and a summary.

    ``models``: label -> (model, label plan from tasks/labels.py); the plan maps the dataset's labels into
    the model's output space. The clean batches come from the run kernel's loader (``loader``, the run's;
    by default one over ``data``). ``progress(done, total)`` is called after each batch. The summary is
    ``{"models", "total", "kept", "dropped": {"wrong", "mask", "unlabelled"}, "wrong_per_model"}``.
    """
    kept: list[int] = []
    dropped = {"wrong": 0, "mask": 0, "unlabelled": 0}
    wrong_per_model = {label: 0 for label in models}
    loader = loader if loader is not None else Loader(data, 0, pixels="cpu", step="curate")
    for b, batch in enumerate(loader.batches(CLEAN, batch_size)):
        samples = batch.samples
        indices = list(range(b * batch_size, b * batch_size + len(samples)))
        labels = np.array([-1 if s.label is None else s.label for s in samples])
        ok = labels >= 0
        dropped["unlabelled"] += int((~ok).sum())
        for label, (model, plan) in models.items():
            # read as the plan reads them (a class subset's columns, a decision map's categories)
            pred = np.asarray(plan.outputs(model.predict_logits([s.image for s in samples]))).argmax(axis=1)
            mapped = np.array([-1 if s.label is None else s.label for s in plan.targets(samples)])
            wrong_per_model[label] += int(((pred != mapped) & (labels >= 0)).sum())
            wrong = ok & (pred != mapped)
            dropped["wrong"] += int(wrong.sum())
            ok &= ~wrong
        if min_mask_fraction is not None:
            for k, s in enumerate(samples):
                if ok[k] and (s.mask is None or float((np.asarray(s.mask) > 0).mean()) < min_mask_fraction):
                    ok[k] = False
                    dropped["mask"] += 1
        kept += [i for i, keep in zip(indices, ok) if keep]
        if progress is not None:
            progress(indices[-1] + 1, len(data))
    summary = {"models": list(models), "total": len(data), "kept": len(kept), "dropped": dropped,
               "wrong_per_model": wrong_per_model}
    return kept, summary


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
    if not models:
        raise ShiftbenchError("curate needs at least one model")
    data = load(dataset, limit=limit)
    nets: dict[str, tuple[Any, Any]] = {}
    for name in models:
        nets[name] = classifier_plan(MODELS.create(name), name, data, f"dataset {dataset!r}")
    indices, found = curated_indices(data, nets, batch_size, min_mask_fraction)
    kept = [data.sample_id(i) for i in indices]
    dropped = found["dropped"]
    summary = {"dataset": dataset, "models": list(models), "total": len(data), "kept": len(kept),
               "dropped": dropped, "ids": kept}
    if out is not None:
        out = Path(out)
        if not out.parent.exists():
            raise ShiftbenchError(f"{out}: folder {out.parent} does not exist")
        header = (f"# shiftbench curate: dataset {dataset}, models {', '.join(models)}, "
                  f"kept {len(kept)} of {len(data)}"
                  + (f", min mask fraction {min_mask_fraction}" if min_mask_fraction is not None else "") + "\n")
        write_atomic(out, header + "".join(f"{i}\n" for i in kept))
    return summary


def classifier_plan(model: Any, name: str, data: Any, dataset_name: str, label_map: Any = None,
                    class_subset: Any = None) -> tuple[Any, Any]:
    """(model set to the dataset's label space, its label plan); refuses a model that is no classifier."""
    if getattr(model, "task", None) != "classification":
        raise ShiftbenchError(f"curate needs classifiers; {name!r} is a {getattr(model, 'task', '?')} model")
    plan = plan_labels(model, data, label_map, dataset_name=dataset_name,
                       class_subset=class_subset)  # refuses before any work
    return plan.model, plan


def curate_run(spec: Any, dataset: Any, plans: dict[str, Any], progress: bool = False,
               pixels: str = "auto") -> tuple[Any, dict[str, Any]]:
    """A run's ``curate:`` section: the dataset cut to the samples every named classifier gets right on
    clean (after ids and limit), and the summary stored with the run. ``plans``: the run's label plans by
    model label; a name that is not one of the run's models is a registered classifier used only to curate.
    Deterministic (clean images, fixed weights), so a resumed run or a Ray worker that opens the dataset
    itself finds the same samples. The clean batches come from the run kernel's loader."""
    import logging

    names = spec.curate.models or [m.label for m in spec.models]
    nets: dict[str, tuple[Any, Any]] = {}
    for name in names:
        if name in plans:
            plan = plans[name]
            if getattr(plan.model, "task", None) != "classification":
                raise ShiftbenchError(f"curate: {name!r} is a {getattr(plan.model, 'task', '?')} model; "
                                      "curation needs classifiers")
            nets[name] = (plan.model, plan)
        else:  # a registered classifier that is not evaluated, only used to curate
            nets[name] = classifier_plan(MODELS.create(name), name, dataset, f"dataset {spec.dataset!r}",
                                         spec.label_map, spec.class_subset)
    with RunProgress(progress, float(len(dataset))) as bar:
        done = [0]

        def advance(k: int, total: int) -> None:
            bar.advance("curating on clean", k - done[0])
            done[0] = k

        loader = spec_loader(spec, dataset, "curate", pixels)
        kept, summary = curated_indices(dataset, nets, spec.batch_size, spec.curate.min_mask_fraction, advance, loader)
    if not kept:
        raise ShiftbenchError(f"curate: none of the {len(dataset)} samples is classified correctly on clean by "
                              f"every model ({', '.join(names)}); nothing to evaluate")
    summary["ids"] = [dataset.sample_id(i) for i in kept]
    logging.getLogger("shiftbench").info(f"curated: {len(kept)} of {len(dataset)} samples that {', '.join(names)} "
                                         "all classify correctly on clean")
    return Subset(dataset, kept), summary
