"""The registered attribute shifts: ``attribute_color``, ``attribute_material``, ``attribute_pattern``,
``attribute_style`` (Pascal-EA), each with a ``classic`` (weight-free, CPU) and a ``diffusion`` backend.

Severity 1..5 is the edit strength. For ``classic`` it is the blend weight ``severity / 5`` of the
edit (0.2 .. 1.0); for ``diffusion`` it is the paper's variation degree ``c = 1 + (severity - 1) / 2``
(severities 1, 3, 5 are the paper's c = 1, 2, 3). Local edits (colour, material, pattern) need the
sample's object mask and change no pixel outside it; styles are global and keep the layout. Both keep
the label, mask and boxes, and rewrite a sample's caption with the attribute
(``"a horse on the grass" -> "a violet horse on the grass"``).
"""

from __future__ import annotations

from typing import Any, ClassVar, Sequence

import numpy as np

from ...conditioning.attribute_text import ATTRIBUTES, LOCAL_FAMILIES, check_attribute, edit_prompt, object_words
from ...errors import ShiftbenchError
from ...registry import SHIFTS
from ...sample import Sample
from ..base import Shift
from . import classic

__all__ = ["AttributeShift", "AttributeColor", "AttributeMaterial", "AttributePattern", "AttributeStyle",
           "edit_attribute", "strength_of", "variation_degree"]

BACKENDS = ("classic", "diffusion")
_INKS = {"white": (245, 245, 240), "black": (25, 25, 28), "red": (215, 30, 35), "yellow": (250, 215, 30),
         "blue": (30, 80, 215), "green": (30, 160, 60)}


def strength_of(severity: int) -> float:
    """Classic backend: blend weight of the edit, 0.2 at severity 1 to 1.0 at 5."""
    return round(int(severity) / 5.0, 6)


def variation_degree(severity: int) -> float:
    """Diffusion backend: the paper's variation degree c (1, 2, 3 at severities 1, 3, 5)."""
    return 1.0 + (int(severity) - 1) / 2.0


def _check_extra(shift: str, kw: dict[str, Any], accepted: Sequence[str]) -> None:
    unknown = sorted(set(kw) - set(AttributeShift.DIFFUSION_PARAMS))
    if unknown:
        raise ShiftbenchError(f"shift {shift!r}: unknown parameter {unknown[0]!r}; accepted parameters: "
                              f"{', '.join(list(accepted) + ['backend', *AttributeShift.DIFFUSION_PARAMS])}")


class AttributeShift(Shift):
    """Common machinery: value checking, backends, caption rewriting, severity mapping."""

    family: ClassVar[str] = ""
    kind: ClassVar[str] = "sample"
    role: ClassVar[str] = "attribute"
    requires: ClassVar[frozenset[str]] = frozenset({"mask"})
    keeps: ClassVar[frozenset[str]] = frozenset({"label", "mask", "boxes", "layout"})

    DIFFUSION_PARAMS: ClassVar[tuple[str, ...]] = ("model", "controlnet", "steps", "guidance", "device")

    def __init__(self, value: str, backend: str = "classic", model: str | None = None,
                 controlnet: str | None = None, steps: int = 20, guidance: float = 7.5, device: str = "cpu"):
        check_attribute(self.family, value)
        if backend not in BACKENDS:
            raise ShiftbenchError(f"shift {self.name!r}: unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
        if backend == "classic" and (model or controlnet):
            raise ShiftbenchError(f"shift {self.name!r}: model/controlnet are for backend='diffusion'")
        if backend == "diffusion" and not model:
            raise ShiftbenchError(
                f"shift {self.name!r}: backend='diffusion' needs model= a Stable Diffusion hub id or local folder"
            )
        self.value, self.backend = value, backend
        self.config: dict[str, Any] = {self.family: value, "backend": backend}
        if backend == "diffusion":
            self.config.update(model=model, controlnet=controlnet, steps=int(steps), guidance=float(guidance), device=device)
        self._editor = None

    @property
    def uses_model(self) -> bool:
        """The diffusion backend loads a pipeline; the classic edits are plain array code."""
        return self.backend == "diffusion"

    # -- params -------------------------------------------------------------------------------
    def sample_params(self, sample: Sample, severity: int, rng: np.random.Generator) -> dict[str, Any]:
        if self.backend == "diffusion":
            return {"c": variation_degree(severity), "seed": int(rng.integers(2**31))}
        return {"strength": strength_of(severity), **self.classic_params(sample, rng)}

    def classic_params(self, sample: Sample, rng: np.random.Generator) -> dict[str, Any]:
        return {}

    # -- paint --------------------------------------------------------------------------------
    def mask_of(self, sample: Sample) -> np.ndarray:
        return classic.object_mask(sample.mask, sample.image.shape, f"shift {self.name!r} on sample {sample.id}")

    def apply(self, sample: Sample, params: dict[str, Any]) -> Sample:
        if self.backend == "diffusion":
            image = self._diffusion(sample, params)
        else:
            image = self.classic(sample, params)
        caption = sample.caption
        if caption:
            caption = edit_prompt(caption, self.family, self.value, sample.class_name)
        return sample.replace(image=image, caption=caption)

    def classic(self, sample: Sample, params: dict[str, Any]) -> np.ndarray:  # pragma: no cover - per family
        raise NotImplementedError

    def _diffusion(self, sample: Sample, params: dict[str, Any]) -> np.ndarray:
        from .diffusion import AttributeEditor  # deferred: start-up cost (pulls torch)

        if self._editor is None:
            cfg = self.config
            self._editor = AttributeEditor.from_pretrained(cfg["model"], controlnet=cfg["controlnet"], device=cfg["device"])
        local = self.family in LOCAL_FAMILIES
        mask = self.mask_of(sample) if local else np.ones(sample.image.shape[:2], bool)
        source = sample.caption or (f"a photo of a {sample.class_name}" if sample.class_name else "a photo")
        return self._editor.edit(
            sample.image, mask, source_prompt=source,
            target_prompt=edit_prompt(source, self.family, self.value, sample.class_name),
            object_words=object_words(source, self.family, self.value, sample.class_name),
            c=float(params["c"]), seed=int(params["seed"]), steps=self.config["steps"],
            guidance=self.config["guidance"], local=local,
        )


@SHIFTS.register("attribute_color", group="attribute",
                 description="recolour the object (violet, pink, multi-color) keeping its shading; mask kept")
class AttributeColor(AttributeShift):
    """Recolour the object (violet, pink, multi-color) keeping its shading; mask kept."""

    family = "color"

    def __init__(self, color: str = "violet", backend: str = "classic", **kw: Any):
        _check_extra("attribute_color", kw, ["color"])
        super().__init__(color, backend, **kw)

    def classic_params(self, sample: Sample, rng: np.random.Generator) -> dict[str, Any]:
        if self.value != "multi-color":
            return {}
        return {"angle": float(rng.uniform(0, 2 * np.pi)), "phase": float(rng.uniform(0, 2 * np.pi)),
                "cycles": float(rng.uniform(0.8, 1.3))}

    def classic(self, sample: Sample, params: dict[str, Any]) -> np.ndarray:
        return classic.recolor(sample.image, self.mask_of(sample), self.value, params["strength"], params)


@SHIFTS.register("attribute_material", group="attribute",
                 description="turn the object into wood, stone, metal or paper (texture transfer in the mask)")
class AttributeMaterial(AttributeShift):
    """Turn the object into wood, stone, metal or paper (texture transfer in the mask)."""

    family = "material"

    def __init__(self, material: str = "wood", backend: str = "classic", texture: str | None = None, **kw: Any):
        _check_extra("attribute_material", kw, ["material", "texture"])
        super().__init__(material, backend, **kw)
        if texture is not None:
            if backend != "classic":
                raise ShiftbenchError(f"shift {self.name!r}: texture= is for the classic backend")
            classic.material_texture(material, str(texture))  # read now: a bad path fails at creation
            self.config["texture"] = str(texture)
        self.texture = None if texture is None else str(texture)

    def classic_params(self, sample: Sample, rng: np.random.Generator) -> dict[str, Any]:
        # wood grain runs roughly along one axis; stone and metal may turn freely
        if self.value == "wood":
            rotation = float(rng.choice([0.0, np.pi / 2]) + rng.normal(0, 0.15))
        else:
            rotation = float(rng.uniform(0, 2 * np.pi))
        params = {"offset": [float(rng.uniform()), float(rng.uniform())], "scale": float(rng.uniform(0.8, 1.4)),
                  "rotation": rotation, "seed": int(rng.integers(2**31))}
        if self.value == "paper":
            params["fold_angles"] = [float(a) for a in rng.uniform(0, np.pi, 2)]
            params["fold_offsets"] = [float(o) for o in rng.uniform(0.25, 0.75, 2)]
        return params

    def classic(self, sample: Sample, params: dict[str, Any]) -> np.ndarray:
        return classic.apply_material(sample.image, self.mask_of(sample), self.value, params["strength"], params,
                                      texture=self.texture)


@SHIFTS.register("attribute_pattern", group="attribute",
                 description="paint dots or stripes on the object following its shading; mask kept")
class AttributePattern(AttributeShift):
    """Paint dots or stripes on the object following its shading; mask kept."""

    family = "pattern"

    def __init__(self, pattern: str = "dotted", backend: str = "classic", **kw: Any):
        _check_extra("attribute_pattern", kw, ["pattern"])
        super().__init__(pattern, backend, **kw)

    def classic_params(self, sample: Sample, rng: np.random.Generator) -> dict[str, Any]:
        mask = self.mask_of(sample)
        mean = classic.srgb_to_oklab(sample.image[mask][None])[0].mean(axis=0)
        inks = list(_INKS)
        lab = classic.srgb_to_oklab(np.array([[_INKS[k] for k in inks]], np.uint8))[0]
        far = np.argsort(-np.linalg.norm(lab - mean, axis=1))[:3]  # the three inks that stand out most
        ink = inks[int(far[int(rng.integers(3))])]
        angle = float(rng.uniform(0, np.pi)) if self.value == "striped" else float(rng.normal(0, 0.2))
        return {"colour": list(_INKS[ink]), "angle": angle, "repeats": float(rng.uniform(5.0, 8.0))}

    def classic(self, sample: Sample, params: dict[str, Any]) -> np.ndarray:
        return classic.apply_pattern(sample.image, self.mask_of(sample), self.value, params["strength"], params)


@SHIFTS.register("attribute_style", group="attribute",
                 description="restyle the whole image (snowy, painting, sketch) keeping the layout")
class AttributeStyle(AttributeShift):
    """Restyle the whole image (snowy, painting, sketch) keeping the layout."""

    family = "style"
    kind = "image"
    requires = frozenset()

    def __init__(self, style: str = "sketch", backend: str = "classic", region: str = "image", **kw: Any):
        if region != "image":
            raise ShiftbenchError(
                f"shift 'attribute_style': style edits are global (region='image'); got region={region!r}. "
                "Use attribute_color/material/pattern for edits inside a mask"
            )
        _check_extra("attribute_style", kw, ["style", "region"])
        super().__init__(style, backend, **kw)

    def classic_params(self, sample: Sample, rng: np.random.Generator) -> dict[str, Any]:
        return {"seed": int(rng.integers(2**31)), "angle": float(rng.uniform(0, np.pi)),
                "flakes": float(rng.uniform(1.0, 2.0))}

    def classic(self, sample: Sample, params: dict[str, Any]) -> np.ndarray:
        return classic.apply_style(sample.image, self.value, params["strength"], params)


_SHIFT_OF = {"color": "attribute_color", "material": "attribute_material", "pattern": "attribute_pattern",
             "style": "attribute_style"}


def edit_attribute(image: np.ndarray, family: str, value: str, mask: np.ndarray | None = None, severity: int = 3,
                   seed: int = 0, sample_id: str = "0", **shift_params: Any) -> np.ndarray:
    """Functional form: edit ``image`` (inside ``mask`` for local families). A style edit with a local
    mask (one that does not cover the whole image) is refused: styles are global by definition.

    >>> img = np.full((32, 32, 3), 120, np.uint8); m = np.zeros((32, 32), bool); m[8:24, 8:24] = True
    >>> out = edit_attribute(img, "color", "violet", m, severity=5)
    >>> bool((out[~m] == img[~m]).all()), bool((out[m] != img[m]).any())
    (True, True)
    """
    if family not in ATTRIBUTES:
        check_attribute(family, value)
    if family == "style":
        if mask is not None and not np.asarray(mask).astype(bool).all():
            raise ShiftbenchError("style edits are global: got a local mask; drop mask= or use a local family")
        sample = Sample(image=image, id=sample_id)
    else:
        sample = Sample(image=image, mask=classic.object_mask(mask, np.asarray(image).shape, f"{family} edit"), id=sample_id)
    shift = SHIFTS.create(_SHIFT_OF[family], **{family: value}, **shift_params)
    return shift(sample, severity=severity, seed=seed).image
