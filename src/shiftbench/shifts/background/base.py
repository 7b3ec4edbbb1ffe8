"""Shared machinery of background shifts: which object mask to use, and pasting the object back exactly.

A background shift changes only what lies outside the object. Its mask comes from a provider
(``mask="auto"``: the sample's own mask when it has one, else U2-Net-p). The new background is laid over
the old one with weight ``w`` (set by severity). An exact mask (the sample's own: the ``objects``
cut-outs' alpha, COCO / VOC annotations; ``conditioning.masks.mask_is_exact``) is used as it is: weight
``w`` everywhere outside the mask, so at severity 5 no pixel of the old background is left. An estimated
mask (u2netp, grabcut, sam) may miss the object's rim, so around it a band of ``dilation`` px (elliptical
kernel, default 6 px as ObjectCompose) is feathered: inside the band the weight ramps linearly from ``w``
at the band's outer edge down to 0 at the object (a seam without a hard cut-out line, at the price of
some old background near the object). Inside the undilated mask the original pixels are copied back
byte for byte either way.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from ...conditioning.masks import DEFAULT_DILATION, check_object_mask, create_mask_provider, dilate, mask_is_exact
from ...errors import ShiftbenchError
from ...sample import Sample
from ..base import Shift

__all__ = ["BackgroundShift", "blend_background", "feather_alpha", "SEVERITY_WEIGHTS"]

SEVERITY_WEIGHTS = (0.2, 0.4, 0.6, 0.8, 1.0)  # share of the new background, severity 1..5


def _band_distance(mask: np.ndarray, dilation: int) -> tuple[np.ndarray, tuple[slice, slice]]:
    """Distance of each pixel to the nearest object pixel, within the bounding box of the dilated mask."""
    import cv2

    grown = dilate(mask, dilation)
    rows, cols = np.flatnonzero(grown.any(axis=1)), np.flatnonzero(grown.any(axis=0))
    box = (slice(int(rows[0]), int(rows[-1]) + 1), slice(int(cols[0]), int(cols[-1]) + 1))
    # every object pixel lies inside the box, so distances computed in the crop are exact there
    # (a 5x5 chamfer mask: within about 2 % of the Euclidean distance, several times faster than exact)
    dist = cv2.distanceTransform((~mask[box]).astype(np.uint8), cv2.DIST_L2, cv2.DIST_MASK_5)
    dist[~grown[box]] = np.inf  # beyond the elliptical band: the new background is complete
    return dist, box


def feather_alpha(mask: np.ndarray, dilation: int) -> np.ndarray:
    """Per-pixel weight of the NEW background before severity: 0 on the object, d / (dilation + 1) at
    distance d inside the elliptical ``dilation`` band, 1 beyond it. float32 HxW."""
    alpha = (~mask).astype(np.float32)
    if dilation <= 0 or not mask.any():
        return alpha
    dist, box = _band_distance(mask, dilation)
    alpha[box] = np.minimum(dist / np.float32(dilation + 1), np.float32(1.0))
    return alpha


def blend_background(image: np.ndarray, background: np.ndarray, mask: np.ndarray, weight: float,
                     dilation: int = DEFAULT_DILATION) -> np.ndarray:
    """``image`` with ``background`` laid over it outside ``mask`` (see the module doc); uint8 HxWx3 out.

    Pixels inside ``mask`` are the input's, byte for byte. Outside the dilation band the two images are
    mixed by OpenCV (``addWeighted``, rounded); only the thin band is blended per pixel.
    """
    import cv2

    if background.shape != image.shape:
        raise ShiftbenchError(f"background of shape {background.shape} does not match the image {image.shape}")
    if background.dtype != np.uint8:
        background = cv2.convertScaleAbs(np.maximum(background, 0))  # rounded and saturated to 0..255
    weight = float(weight)
    out = background.copy() if weight >= 1.0 else cv2.addWeighted(image, 1.0 - weight, background, weight, 0.0)
    if dilation > 0 and mask.any():
        dist, box = _band_distance(mask, dilation)
        ys, xs = np.nonzero(np.isfinite(dist) & (dist > 0))
        a = (np.minimum(dist[ys, xs] / np.float32(dilation + 1), np.float32(1.0)) * np.float32(weight))[:, None]
        ys, xs = ys + box[0].start, xs + box[1].start
        img, bg = image[ys, xs].astype(np.float32), background[ys, xs].astype(np.float32)
        out[ys, xs] = np.clip(np.rint(img + a * (bg - img)), 0, 255).astype(np.uint8)
    np.copyto(out, image, where=mask[..., None])  # the object, exactly
    return out


_PROVIDERS: dict[str, Any] = {}


def _shared_provider(name: str, options: dict[str, Any]) -> Any:
    """One provider per (name, options) in the process: its cache then serves every shift and prompt, so
    an image's mask is computed once however many background conditions a run has."""
    import json

    key = f"{name}:{json.dumps(options, sort_keys=True, default=repr)}"
    if key not in _PROVIDERS:
        _PROVIDERS[key] = create_mask_provider(name, **options)
    return _PROVIDERS[key]


def _check_dilation(dilation: Any) -> int:
    if isinstance(dilation, bool) or not isinstance(dilation, (int, np.integer)) or not 0 <= dilation <= 64:
        raise ShiftbenchError(f"dilation must be an int of pixels in 0..64, got {dilation!r}")
    return int(dilation)


class BackgroundShift(Shift):
    """Base of the background shifts: resolves the object mask and validates it.

    ``mask``: ``"auto"`` (the sample's mask, else u2netp), ``"ground_truth"``, ``"u2netp"``, ``"grabcut"``
    or ``"sam"``; ``mask_options``: keyword arguments for the provider. ``dilation``: px of the band
    feathered around an estimated mask (an exact one gets none: :meth:`band`) and, for background_only,
    removed with the object.
    """

    kind: ClassVar[str] = "sample"
    role: ClassVar[str] = "background"
    requires: ClassVar[frozenset[str]] = frozenset({"mask"})  # a mask from the sample or from a provider
    keeps: ClassVar[frozenset[str]] = frozenset({"label", "mask", "boxes"})
    severities: ClassVar[tuple[int, int]] = (1, 5)
    default_severity: ClassVar[int | None] = 5
    default_dilation: ClassVar[int] = DEFAULT_DILATION

    def __init__(self, mask: str = "auto", dilation: int | None = None, mask_options: dict | None = None,
                 **config: Any):
        if mask != "auto":
            create_mask_provider(mask, **(mask_options or {}))  # fail now on a bad name or option
        self.mask_name = mask
        self.mask_options = dict(mask_options or {})
        self.dilation = self.default_dilation if dilation is None else _check_dilation(dilation)
        self.config = {"mask": mask, "dilation": self.dilation, **config}
        if self.mask_options:
            self.config["mask_options"] = self.mask_options

    # -- masks ------------------------------------------------------------------------------------
    def provider_name(self, sample: Sample) -> str:
        if self.mask_name == "auto":
            return "ground_truth" if sample.mask is not None else "u2netp"
        return self.mask_name

    def check_sample(self, sample: Sample) -> None:
        if self.provider_name(sample) == "ground_truth" and sample.mask is None:
            raise ShiftbenchError(f"shift {self.name!r} needs samples with a mask (mask='ground_truth'); "
                                  f"sample {sample.id} has none")
        self.mask_exact(sample)  # a malformed meta 'mask_exact' is refused here, before anything is drawn

    def load_conditioning(self, sample: Sample) -> None:
        """Load the mask provider that samples like ``sample`` need (u2netp's file, SAM's weights)."""
        self.check_sample(sample)
        name = self.provider_name(sample)
        if name != "ground_truth":
            _shared_provider(name, self.mask_options if name == self.mask_name else {}).load()

    def object_mask(self, sample: Sample) -> np.ndarray:
        """The binary object mask of ``sample`` (validated: not empty, not the whole image, right size)."""
        name = self.provider_name(sample)
        if name == "ground_truth":
            raw = sample.mask
            return check_object_mask(raw, sample.size, f"shift {self.name!r}, sample {sample.id}")
        options = self.mask_options if name == self.mask_name else {}
        result = _shared_provider(name, options).one(sample)
        return check_object_mask(result.mask, sample.size, f"shift {self.name!r}, sample {sample.id} ({name} mask)")

    def mask_exact(self, sample: Sample) -> bool:
        """True when the shift uses the sample's own mask and that mask is exact (``mask_is_exact``: the
        ``objects`` alpha cut-outs, COCO / VOC annotations, unless ``meta["mask_exact"]`` is False)."""
        return self.provider_name(sample) == "ground_truth" and mask_is_exact(sample)

    def band(self, sample: Sample) -> int:
        """Px of the feathered band around the object: 0 for an exact mask (the object laid on the new
        background by its mask, nothing of the old background left around it), ``dilation`` for an
        estimated one (a seam that hides the provider's errors on the rim, keeping some old background)."""
        return 0 if self.mask_exact(sample) else self.dilation

    # -- the contract -----------------------------------------------------------------------------
    def background_params(self, sample: Sample, severity: int, rng: np.random.Generator) -> dict[str, Any]:
        """Random draws of the new background (override)."""
        return {}

    def background(self, sample: Sample, params: dict[str, Any]) -> np.ndarray:
        """The new background, HxWx3 uint8 or float32 0..255 of the sample's size (override)."""
        raise NotImplementedError

    def sample_params(self, sample: Sample, severity: int, rng: np.random.Generator) -> dict[str, Any]:
        self.object_mask(sample)  # refuse a bad mask before anything is drawn
        params = {"weight": SEVERITY_WEIGHTS[severity - 1] if self.severities == (1, 5) else 1.0}
        params.update(self.background_params(sample, severity, rng))
        return params

    def apply(self, sample: Sample, params: dict[str, Any]) -> Sample:
        mask = self.object_mask(sample)
        bg = self.background(sample, params)
        image = blend_background(sample.image, bg, mask, float(params["weight"]), self.band(sample))
        return sample.replace(image=image, meta={**sample.meta, "background_shift": self.name})
