"""The perturbation-sequence base class (ImageNet-P, Hendrycks and Dietterich, ICLR 2019).

A sequence shift turns one image into T frames of a slowly growing (or moving) perturbation: 31 frames
for most perturbations, 41 for ``translate``, frame 0 the first of the published procedure (the clean image
for the noise sequences). A model is scored on how often its prediction flips along the sequence
(metrics/stability.py): noise sequences compare every frame with the first, the others each frame with
the one ``step`` frames before it.

Severity is ImageNet-P's *difficulty* (1..3, default 1, the published benchmark's): for the noise sequences
it picks the noise level of the published ``_2`` and ``_3`` variants; for the others the frames are the same
and the difficulty is the step between compared frames (the reference's ``args.difficulty``).

The call contract of a sequence shift: an ndarray image in, its frames out, uint8 (T, H, W, 3); a Sample in,
a Sample out with ``frames`` set, ``image`` its last frame and ``meta["sequence"]`` saying how its frames are
compared (``{"reference": "first" | "previous", "step": d}``). ``crop=`` (an int, default None) center-crops
every frame to ``crop x crop`` as the published procedure does after its perturbation (the images were
resized to 256 and cropped to 224): geometric sequences warp the whole image and then crop, the others
crop first and then perturb, as the reference does.
"""

from __future__ import annotations

from typing import Any, ClassVar, Sequence

import numpy as np

from ...errors import ShiftbenchError
from ...sample import Sample
from ..base import ImageShift

__all__ = ["PerturbationSequence", "DIFFICULTIES", "center_crop"]

DIFFICULTIES = (1, 2, 3)


def center_crop(image: np.ndarray, size: int) -> np.ndarray:
    """The central ``size x size`` of an HxWxC image (torchvision's CenterCrop rounding: top = round((H - size) / 2))."""
    h, w = image.shape[:2]
    if size > h or size > w:
        raise ShiftbenchError(f"crop {size} is larger than the image ({h}x{w})")
    top, left = int(round((h - size) / 2.0)), int(round((w - size) / 2.0))
    return image[top:top + size, left:left + size]


class PerturbationSequence(ImageShift):
    """An ImageNet-P perturbation sequence. Subclasses set ``frames`` (T), ``noise`` (frames compared with
    the first), ``geometric`` (warp before the crop), and implement ``sequence(image, params)`` -> uint8
    (T, H, W, 3); random ones ``draws(shape, difficulty, rng)`` -> JSON params; the tensor path
    ``sequence_tensor(x, params)`` (uint8 (N, 3, H, W) -> uint8 (N, T, 3, H, W))."""

    role: ClassVar[str] = "perturbation"
    severities: ClassVar[tuple[int, int]] = (1, 3)
    default_severity: ClassVar[int | None] = 1
    keeps: ClassVar[frozenset[str]] = frozenset({"label"})  # geometric sequences move masks and boxes
    frames: ClassVar[int] = 31
    noise: ClassVar[bool] = False
    geometric: ClassVar[bool] = False

    def __init__(self, crop: int | None = None):
        if crop is not None and (isinstance(crop, bool) or not isinstance(crop, int) or crop < 1):
            raise ShiftbenchError(f"shift {self.name!r}: crop must be a positive integer (pixels), got {crop!r}")
        self.crop = crop
        self.config: dict[str, Any] = {} if crop is None else {"crop": crop}

    # -- to implement --------------------------------------------------------------------------------
    def draws(self, shape: tuple[int, ...], difficulty: int, rng: np.random.Generator) -> dict[str, Any]:
        """Random draws for one image of ``shape`` (the shape the sequence is made at); none by default."""
        return {}

    def sequence(self, image: np.ndarray, params: dict[str, Any]) -> np.ndarray:
        raise NotImplementedError

    def sequence_tensor(self, x: Any, params: Sequence[dict[str, Any]]) -> Any:
        raise NotImplementedError

    # -- the shift contract ----------------------------------------------------------------------------
    @property
    def draws_randomly(self) -> bool:
        return type(self).draws is not PerturbationSequence.draws

    def step(self, difficulty: int) -> int:
        """Frames between two compared frames: 1 for noise sequences (each compared with the first)."""
        return 1 if self.noise else int(difficulty)

    def comparison(self, difficulty: int) -> dict[str, Any]:
        return {"reference": "first" if self.noise else "previous", "step": self.step(difficulty), "frames": self.frames}

    def _made_at(self, image: np.ndarray) -> tuple[int, ...]:
        """The shape the perturbation is made at: the crop's for pixel-wise sequences, the image's otherwise."""
        if self.crop is None or self.geometric:
            return image.shape
        return (self.crop, self.crop, *image.shape[2:])

    def image_params(self, image: np.ndarray, severity: int, rng: np.random.Generator) -> dict[str, Any]:
        if self.crop is not None:
            center_crop(image, self.crop)  # refused here, before any work, with the sizes named
        return {"difficulty": int(severity), **self.draws(self._made_at(image), int(severity), rng)}

    def rng(self, seed: int, sample_id: str | None) -> np.random.Generator | None:
        return super().rng(seed, sample_id) if self.draws_randomly else None

    def frames_of(self, image: np.ndarray, params: dict[str, Any]) -> np.ndarray:
        """The sequence of one image, cropped as configured: uint8 (T, h, w, 3)."""
        if self.crop is not None and not self.geometric:
            image = np.ascontiguousarray(center_crop(image, self.crop))
        out = np.asarray(self.sequence(image, params))
        if out.dtype != np.uint8 or out.ndim != 4 or out.shape[1:] != image.shape or out.shape[0] < 2:
            raise RuntimeError(f"shift {self.name!r} made {out.dtype} {out.shape} frames for a {image.shape} image")
        if self.crop is not None and self.geometric:
            top, left = (int(round((d - self.crop) / 2.0)) for d in image.shape[:2])
            out = out[:, top:top + self.crop, left:left + self.crop]
        return np.ascontiguousarray(out)

    @classmethod
    def runs_on_tensors(cls) -> bool:
        """Whether this sequence has a tensor path (``sequence_tensor``): the runner's device pixels."""
        return cls.sequence_tensor is not PerturbationSequence.sequence_tensor

    def frames_tensor(self, x: Any, params: Sequence[dict[str, Any]]) -> Any:
        """:meth:`frames_of` on a device: uint8 (N, 3, H, W) -> uint8 (N, T, 3, h, w), cropped as configured."""
        if self.crop is not None and not self.geometric:
            top, left = (int(round((d - self.crop) / 2.0)) for d in x.shape[2:4])
            x = x[:, :, top:top + self.crop, left:left + self.crop].contiguous()
        out = self.sequence_tensor(x, params)
        if self.crop is not None and self.geometric:
            top, left = (int(round((d - self.crop) / 2.0)) for d in out.shape[3:5])
            out = out[..., top:top + self.crop, left:left + self.crop].contiguous()
        return out

    def apply_batch(self, samples: Sequence[Sample], params: Sequence[dict[str, Any]]) -> list[Sample]:
        out = []
        for s, p in zip(samples, params):
            frames = self.frames_of(s.image, p)
            meta = dict(s.meta, sequence=self.comparison(int(p["difficulty"])))
            keep = {} if self.crop is None and not self.geometric else {"mask": None, "boxes": None, "box_labels": None}
            out.append(s.replace(image=frames[-1], frames=frames, meta=meta, **keep))
        return out

    def _wrap(self, x: Any, sample_id: str | None):
        sample, unwrap = super()._wrap(x, sample_id)
        if isinstance(x, Sample):
            return sample, unwrap
        return sample, lambda s: s.frames  # an image in: its frames out
