"""Why a model fails: gradient attribution (Grad-CAM), background reliance and feature embeddings.

- :func:`gradcam`: Grad-CAM maps of a torch classifier at the input image's size (the last feature map
  with a spatial extent, found by hooks; weighted by its spatially averaged gradients; ReLU).
- :func:`outside_share`: the share of an attribution map's mass outside the object mask: "background
  reliance", a number per image (0: all on the object, 1: all on the background).
- :func:`penultimate_features`: the input of the classifier's last linear layer, per image.
- :func:`embed_2d`: t-SNE (scikit-learn) of those features, clean and shifted together.
- :func:`run_analysis`: the step of a run that computes the spec's ``analysis:`` section (checked in
  spec.py, with its views ``ANALYSIS_VIEWS``) after the conditions and stores it in the run (artifacts
  under ``analysis/``, results/artifacts.py), drawn by the report; a resumed run that holds them does not
  compute them again, a run killed during this step computes them on resume.

Users import the functions from :mod:`shiftbench.analysis`, which re-exports them from here.

Grad-CAM is written here (30 lines on torch hooks) rather than taken from the ``grad-cam`` package,
which requires the GUI build of OpenCV (it conflicts with the headless one the core uses) and
torchvision; ``tests/engine/test_analysis.py`` holds it to a brute-force occlusion map on a small model.
"""

from __future__ import annotations

import json
import logging
import time
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from ..errors import ShiftbenchError
from ..metrics.uncertainty import bootstrap_mean
from ..results.artifacts import (ANALYSIS_DONE, ANALYSIS_EMBEDDING, ANALYSIS_PREFIX, ANALYSIS_RELIANCE, gradcam_key,
                                 stored_analysis)
from ..results.store import params_key
from .spec import ANALYSIS_VIEWS

if TYPE_CHECKING:
    from ..results.store import Store
    from .kernel import Plan

__all__ = ["gradcam", "occlusion_map", "outside_share", "penultimate_features", "embed_2d", "run_analysis",
           "bootstrap_mean", "ANALYSIS_VIEWS", "ANALYSIS_PREFIX", "stored_analysis", "supports_analysis"]

THUMB = 112  # side of a stored Grad-CAM overlay

log = logging.getLogger("shiftbench")


def supports_analysis(model: Any) -> bool:
    """Gradient views need a differentiable path from pixels to logits (``forward_images``)."""
    return callable(getattr(model, "forward_images", None)) and getattr(model, "module", None) is not None


def _spatial_layer(module: Any, x: Any) -> Any:
    """The module whose output is the last 4-D feature map with a spatial extent in one forward of ``x``."""
    import torch

    found: list[Any] = []
    hooks = []
    for sub in module.modules():
        if sub is module:
            continue

        def hook(mod, _inp, out, _found=found):
            if isinstance(out, torch.Tensor) and out.ndim == 4 and out.shape[-1] > 1 and out.shape[-2] > 1:
                _found.append(mod)
        hooks.append(sub.register_forward_hook(hook))
    try:
        with torch.no_grad():
            module(x)
    finally:
        for h in hooks:
            h.remove()
    if not found:
        raise ShiftbenchError("Grad-CAM: the model has no layer with a spatial feature map")
    return found[-1]


def gradcam(model: Any, images: Sequence[np.ndarray], targets: Sequence[int] | None = None,
            layer: Any = None, batch: int = 16) -> tuple[list[np.ndarray], np.ndarray]:
    """Grad-CAM of a torch classifier (a ``TorchClassifier``: ``module``, ``forward_images``).

    Returns (maps, classes): one float32 (H, W) map per image at the image's own size, >= 0 (zero outside
    the region the model sees), and the class each map explains (``targets``, default the predicted
    class). Images may differ in size; each goes through the model's own crop and resize."""
    import torch
    import torch.nn.functional as F

    if not supports_analysis(model):
        raise ShiftbenchError(f"model {getattr(model, 'name', type(model).__name__)!r}: Grad-CAM needs a torch "
                              f"classifier with a differentiable forward (forward_images)")
    module = model.module
    param = next(module.parameters())
    if layer is None:
        layer = _spatial_layer(module, torch.zeros(1, 3, *model.preprocess.size, device=param.device, dtype=param.dtype))
    maps: list[np.ndarray | None] = [None] * len(images)
    classes = np.zeros(len(images), dtype=np.int64)
    by_shape: dict[tuple[int, ...], list[int]] = {}
    for i, image in enumerate(images):
        by_shape.setdefault(tuple(np.shape(image)), []).append(i)
    for shape, positions in by_shape.items():
        top, left, ch, cw = model.preprocess.crop_box(shape[0], shape[1])
        for start in range(0, len(positions), batch):
            chunk = positions[start:start + batch]
            x01 = torch.from_numpy(np.stack([images[i] for i in chunk])).to(param.device).permute(0, 3, 1, 2).float() / 255.0
            x01.requires_grad_(True)  # the weights are frozen: the input carries the graph to the feature map
            store: dict[str, Any] = {}

            def keep(_mod, _inp, out, _store=store):
                out.retain_grad()
                _store["a"] = out

            handle = layer.register_forward_hook(keep)
            try:
                with torch.enable_grad():
                    logits = model.forward_images(x01)
                    cls = logits.argmax(1) if targets is None else torch.as_tensor(
                        [int(targets[i]) for i in chunk], device=logits.device)
                    module.zero_grad(set_to_none=True)
                    # images are independent (eval mode): one backward of the summed scores gives each its own gradient
                    logits.gather(1, cls.view(-1, 1)).sum().backward()
            finally:
                handle.remove()
            acts = store["a"]
            weights = acts.grad.mean(dim=(2, 3), keepdim=True)
            cam = F.relu((weights * acts).sum(dim=1, keepdim=True)).detach().float()
            # back to the image: the model saw the crop box, resized to its input size
            region = F.interpolate(cam, size=(ch, cw), mode="bilinear", align_corners=False)[:, 0].clamp_(min=0)
            region = region.cpu().numpy()
            for k, i in enumerate(chunk):
                full = np.zeros(shape[:2], dtype=np.float32)
                full[top:top + ch, left:left + cw] = region[k]
                maps[i] = full
                classes[i] = int(cls[k])
    return [m for m in maps if m is not None], classes


def occlusion_map(score: Any, image: np.ndarray, patch: int, stride: int | None = None,
                  fill: float | None = None) -> np.ndarray:
    """Brute-force attribution: the drop of ``score(image)`` when a ``patch`` x ``patch`` square is set to
    ``fill`` (default the image mean), averaged over the squares covering each pixel."""
    stride = stride or patch
    h, w = image.shape[:2]
    base = float(score(image))
    fill_value = image.mean(axis=(0, 1)) if fill is None else fill
    total = np.zeros((h, w), dtype=np.float64)
    count = np.zeros((h, w), dtype=np.float64)
    for y in range(0, max(h - patch, 0) + 1, stride):
        for x in range(0, max(w - patch, 0) + 1, stride):
            occluded = image.copy()
            occluded[y:y + patch, x:x + patch] = fill_value
            total[y:y + patch, x:x + patch] += base - float(score(occluded))
            count[y:y + patch, x:x + patch] += 1
    return (total / np.maximum(count, 1)).astype(np.float32)


def outside_share(attribution: np.ndarray, mask: np.ndarray) -> float | None:
    """The share of non-negative attribution mass outside ``mask`` (None when the map is all zero)."""
    a = np.clip(np.asarray(attribution, dtype=np.float64), 0, None)
    m = np.asarray(mask).astype(bool)
    if a.shape != m.shape:
        raise ShiftbenchError(f"attribution map {a.shape} and mask {m.shape} differ in size")
    total = a.sum()
    if total <= 0:
        return None
    return float(a[~m].sum() / total)


def penultimate_features(model: Any, images: Sequence[np.ndarray], batch: int = 32) -> np.ndarray:
    """(N, D) float32: the input of the model's last linear layer (its penultimate features)."""
    import torch

    if getattr(model, "module", None) is None or getattr(model, "preprocess", None) is None:
        raise ShiftbenchError(f"model {getattr(model, 'name', '?')!r}: embeddings need a torch classifier")
    linears = [m for m in model.module.modules() if isinstance(m, torch.nn.Linear)]
    if not linears:
        raise ShiftbenchError(f"model {getattr(model, 'name', '?')!r} has no linear layer to read features before")
    out: list[np.ndarray] = []

    def grab(_mod, inp, _out):
        out.append(inp[0].detach().float().flatten(1).cpu().numpy())

    handle = linears[-1].register_forward_hook(grab)
    try:
        for i in range(0, len(images), batch):
            with torch.inference_mode():
                model.forward(model.preprocess_tensor(list(images[i:i + batch])))
    finally:
        handle.remove()
    return np.concatenate(out).astype(np.float32) if out else np.zeros((0, 0), np.float32)


def embed_2d(features: np.ndarray, seed: int = 0) -> np.ndarray:
    """2-D t-SNE of ``features`` (scikit-learn; PCA init, perplexity at most 30 and below n / 3)."""
    from sklearn.manifold import TSNE

    n = len(features)
    if n < 4:
        raise ShiftbenchError(f"an embedding needs at least 4 points, got {n}")
    perplexity = float(max(2.0, min(30.0, (n - 1) / 3.0)))
    coords = TSNE(n_components=2, perplexity=perplexity, init="pca", random_state=int(seed),
                  learning_rate="auto").fit_transform(features.astype(np.float64))
    return coords.astype(np.float32)


# -- the spec's analysis: section ----------------------------------------------------------------


def _overlay(image: np.ndarray, cam: np.ndarray) -> bytes:
    """A THUMB-sized PNG of ``image`` with ``cam`` (normalised to its maximum) as a jet heat map over it."""
    import cv2

    h, w = image.shape[:2]
    scale = THUMB / max(h, w)
    size = (max(1, round(w * scale)), max(1, round(h * scale)))
    small = cv2.resize(image, size, interpolation=cv2.INTER_AREA)
    heat = cv2.resize(cam, size, interpolation=cv2.INTER_AREA)
    peak = float(heat.max())
    heat8 = np.zeros(heat.shape, np.uint8) if peak <= 0 else np.clip(heat / peak * 255.0, 0, 255).astype(np.uint8)
    colour = cv2.applyColorMap(heat8, cv2.COLORMAP_JET)[..., ::-1]
    blend = cv2.addWeighted(small, 0.5, colour, 0.5, 0.0)
    ok, png = cv2.imencode(".png", blend[..., ::-1])
    return png.tobytes()


def _shifted_sets(plan: "Plan", conditions: Sequence[Any], limit: int) -> dict[int, list[Any]]:
    """The first ``limit`` samples of each condition, from the run's loader (:meth:`Plan.loader`): shifted
    as the runner shifts them, ``on_error: skip`` leaving out a sample a shift fails on (it is then absent
    from that condition's views, which pair samples by id), ``pixels: device`` making the pixels where the
    models' are made. Each shifted image is downloaded to the CPU once for the views."""
    loader = plan.loader("analysis")
    out: dict[int, list[Any]] = {}
    for ci, cond in enumerate(conditions):
        out[ci] = [s for batch in loader.batches(cond, plan.spec.batch_size, limit) for s in batch.shifted()]
    return out


def run_analysis(plan: "Plan", store: "Store", run_id: str | None, progress: bool = False) -> dict[str, Any]:
    """Compute and store the views of the spec's ``analysis:`` section unless the run already holds them."""
    section = getattr(plan.spec, "analysis", None)
    if not section or run_id is None or plan.retrieval is not None:
        return {}
    held = stored_analysis(store, run_id)
    if "done" in held:
        return held
    views = section.views
    models = {label: m for label, m in plan.models.items()
              if not section.models or label in section.models}
    usable = {label: m for label, m in models.items() if supports_analysis(m)}
    for label in sorted(set(models) - set(usable)):
        log.warning("analysis: model %r is not a torch classifier with a differentiable forward; left out", label)
    if not usable:
        store.put_artifact(run_id, ANALYSIS_DONE, json.dumps({"models": [], "views": views}).encode("utf-8"))
        return stored_analysis(store, run_id)
    started = time.monotonic()
    seed = plan.spec.seed
    limit = min(int(section.limit), len(plan.dataset))
    n_grid = min(int(section.samples), limit)
    conditions = list(plan.conditions)
    shifted = _shifted_sets(plan, conditions, limit)
    reliance_rows = []
    embedding: dict[str, Any] = {}
    for label, model in usable.items():
        for ci, cond in enumerate(conditions):
            samples = shifted[ci]
            pk = params_key(cond.params)
            if "gradcam" in views or "reliance" in views:
                wanted = samples if "reliance" in views else samples[:n_grid]
                maps, classes = gradcam(model, [s.image for s in wanted],
                                        targets=None if section.target == "predicted" else
                                        [int(s.label) for s in wanted])
                if "gradcam" in views:
                    for s, cam, cls in zip(wanted[:n_grid], maps, classes):
                        key = gradcam_key(label, cond.shift_name, pk, cond.severity, s.id)
                        store.put_artifact(run_id, key, _overlay(s.image, cam), {
                            "model": label, "shift": cond.shift_name, "params_key": pk, "severity": cond.severity,
                            "sample_id": str(s.id), "class": int(cls), "label": s.label})
                if "reliance" in views:
                    values = [outside_share(cam, s.mask) if s.mask is not None else None
                              for s, cam in zip(wanted, maps)]
                    reliance_rows.append({"model": label, "shift": cond.shift_name, "params": cond.params,
                                          "severity": cond.severity, "ids": [str(s.id) for s in wanted],
                                          "values": values})
        if "embedding" in views:
            feats, names = [], []
            for ci, cond in enumerate(conditions):
                f = penultimate_features(model, [s.image for s in shifted[ci]])
                feats.append(f)
                names.extend([ci] * len(f))
            coords = embed_2d(np.concatenate(feats), seed=seed)
            embedding[label] = {
                "conditions": [{"shift": c.shift_name, "params": c.params, "severity": c.severity} for c in conditions],
                "points": [[round(float(x), 4), round(float(y), 4)] for x, y in coords], "condition": names,
                "ids": [str(s.id) for ci in range(len(conditions)) for s in shifted[ci]]}
        if progress:
            print(f"analysis: {label} done, {time.monotonic() - started:.0f} s", flush=True)
    if "reliance" in views:
        store.put_artifact(run_id, ANALYSIS_RELIANCE, json.dumps(reliance_rows, sort_keys=True).encode("utf-8"))
    if "embedding" in views:
        store.put_artifact(run_id, ANALYSIS_EMBEDDING, json.dumps(embedding, sort_keys=True).encode("utf-8"))
    store.put_artifact(run_id, ANALYSIS_DONE, json.dumps({"models": sorted(usable), "views": views}).encode("utf-8"))
    log.info("analysis: %s for %d models in %.1f s", ", ".join(views), len(usable), time.monotonic() - started)
    return stored_analysis(store, run_id)
