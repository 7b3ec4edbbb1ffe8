"""``adversarial_texture``: a background optimised on CPU to fool a bundled classifier, the object kept exactly.

The background is a low-resolution colour field ``P`` (``grid`` x ``grid`` x 3 logits, seeded init),
upsampled bilinearly to the image size, squashed by a sigmoid and laid behind the object exactly like the
``compose`` backend (no band around an exact mask, a feathered dilation band around an estimated one, the
object pasted back). AdamW (lr 0.1, as ObjectCompose's Algorithm 1) updates ``P`` to MAXIMISE the
cross-entropy of the true label under the source classifier (default: the bundled EfficientNet-Lite0)
through its differentiable preprocessing (``forward_images``). Severity 1..5 sets the number of iterations to 6, 12, 18, 24, 30 (5 = the paper's
N = 30, always run in full by default, as Algorithm 1 does: the longer attack transfers better). With
``early_stop=True`` an image stops as soon as the classifier's top-1 is wrong on the image as it will be
saved (uint8, through the model's own predict path): cheaper, a minimal attack that transfers less.

Each image is optimised on its own: batching independent attacks changes float rounding (so a batch would
not equal the items one by one) and gains nothing on CPU.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from ...errors import ShiftbenchError
from ...registry import MODELS, SHIFTS
from ...sample import Sample
from .base import BackgroundShift, blend_background, feather_alpha

__all__ = ["AdversarialTexture", "STEPS_PER_SEVERITY", "source_classifier"]

STEPS_PER_SEVERITY = (6, 12, 18, 24, 30)
_MODELS: dict[str, Any] = {}


def source_classifier(model: Any) -> Any:
    """A differentiable classifier by registered name (created once per process) or the object itself."""
    if not isinstance(model, str):
        if not hasattr(model, "forward_images"):
            raise ShiftbenchError("the source classifier needs a differentiable forward_images(x01) (a TorchClassifier)")
        return model
    if model not in _MODELS:
        created = MODELS.create(model)
        if not hasattr(created, "forward_images"):
            raise ShiftbenchError(f"model {model!r} is not differentiable (no forward_images); use a torch classifier")
        _MODELS[model] = created
    return _MODELS[model]


class _one_torch_thread:
    """torch's intra-op threads set to one inside the block (restored after)."""

    def __enter__(self) -> None:
        import torch

        self.before = torch.get_num_threads()
        torch.set_num_threads(1)

    def __exit__(self, *exc: Any) -> None:
        import torch

        torch.set_num_threads(self.before)


@SHIFTS.register("adversarial_texture", group="background", compose="adversarial", source=("model", "efficientnet_lite0"),
                 description="background optimised (AdamW, CPU) to fool EfficientNet-Lite0; object kept exactly",
                 # the generic suite would run ~55 Lite0 attacks (about a minute on 2 cores); the same checks run
                 # on fewer calls in tests/shifts/test_background_adversarial.py
                 contract=False)
class AdversarialTexture(BackgroundShift):
    """Adversarial colour-field background against a source classifier (default efficientnet_lite0)."""

    keeps: ClassVar[frozenset[str]] = frozenset({"label", "mask", "boxes"})

    def __init__(self, model: Any = "efficientnet_lite0", steps: int | None = None, lr: float = 0.1,
                 grid: int = 32, early_stop: bool = False, mask: str = "auto", dilation: int | None = None,
                 mask_options: dict | None = None):
        if steps is not None and (isinstance(steps, bool) or not isinstance(steps, int) or not 0 <= steps <= 1000):
            raise ShiftbenchError(f"adversarial_texture: steps must be an int in 0..1000, got {steps!r}")
        if not isinstance(lr, (int, float)) or isinstance(lr, bool) or not 0 < lr <= 10:
            raise ShiftbenchError(f"adversarial_texture: lr must be a number in (0, 10], got {lr!r}")
        if isinstance(grid, bool) or not isinstance(grid, int) or not 2 <= grid <= 256:
            raise ShiftbenchError(f"adversarial_texture: grid must be an int in 2..256, got {grid!r}")
        self.model_ref, self.steps, self.lr, self.grid, self.early_stop = model, steps, float(lr), grid, bool(early_stop)
        model_name = model if isinstance(model, str) else getattr(model, "name", type(model).__name__)
        super().__init__(mask=mask, dilation=dilation, mask_options=mask_options, model=model_name, steps=steps,
                         lr=self.lr, grid=grid, early_stop=self.early_stop)

    def check_sample(self, sample: Sample) -> None:
        super().check_sample(sample)
        if sample.label is None:
            raise ShiftbenchError(f"shift 'adversarial_texture' needs a class label; sample {sample.id} has none")

    def sample_params(self, sample: Sample, severity: int, rng: np.random.Generator) -> dict[str, Any]:
        self.object_mask(sample)
        steps = STEPS_PER_SEVERITY[severity - 1] if self.steps is None else self.steps
        return {"weight": 1.0, "steps": steps, "init_seed": int(rng.integers(2**31))}

    def optimise(self, sample: Sample, params: dict[str, Any]) -> tuple[np.ndarray, dict[str, Any]]:
        """The optimised background (HxWx3 float32 0..255) and a record of the attack.

        On a CPU the attack runs on one torch thread: the gradients' float sums otherwise depend on how
        many threads split them, and the same seed must give the same bytes in this process, in a pool
        worker and on a Ray actor (which gets one thread per CPU it holds).
        """
        model = source_classifier(self.model_ref)
        if str(getattr(model, "device", "cpu")).startswith("cpu"):
            with _one_torch_thread():
                return self._optimise(model, sample, params)
        return self._optimise(model, sample, params)

    def _optimise(self, model: Any, sample: Sample, params: dict[str, Any]) -> tuple[np.ndarray, dict[str, Any]]:
        import torch
        import torch.nn.functional as F

        num_classes = model.label_space.num_classes if getattr(model, "label_space", None) else None
        if num_classes is not None and not 0 <= sample.label < num_classes:
            raise ShiftbenchError(f"sample {sample.id}: label {sample.label} is outside the source classifier's "
                                  f"{num_classes} classes")
        mask, band = self.object_mask(sample), self.band(sample)
        h, w = sample.size
        init = np.random.default_rng(int(params["init_seed"])).normal(0.0, 1.5, size=(1, 3, self.grid, self.grid))
        p = torch.tensor(init, dtype=torch.float32, requires_grad=True)
        image = torch.from_numpy(sample.image).permute(2, 0, 1)[None].float() / 255.0
        alpha = torch.from_numpy(feather_alpha(mask, band))[None, None]
        target = torch.tensor([int(sample.label)])
        opt = torch.optim.AdamW([p], lr=self.lr)

        def background() -> Any:
            return torch.sigmoid(F.interpolate(p, size=(h, w), mode="bilinear", align_corners=False))

        used, fooled, loss_value, first_loss = 0, False, float("nan"), None
        for step in range(int(params["steps"]) + 1):
            x = image + alpha * (background() - image)
            logits = model.forward_images(x).float()
            loss = F.cross_entropy(logits, target)
            loss_value = float(loss.detach())
            first_loss = loss_value if first_loss is None else first_loss
            fooled = int(logits.argmax(dim=1)) != int(sample.label)
            if fooled and self.early_stop and hasattr(model, "predict_logits"):
                # confirm on the bytes that would be saved, through the model's own predict path (its PIL
                # resize differs from the differentiable one, so a float-only success can be lost in rounding)
                with torch.no_grad():
                    bg_now = (background()[0].permute(1, 2, 0) * 255.0).numpy().astype(np.float32)
                saved = blend_background(sample.image, bg_now, mask, 1.0, band)
                fooled = int(np.argmax(model.predict_logits([saved])[0])) != int(sample.label)
            if (fooled and self.early_stop) or step == int(params["steps"]):
                break
            opt.zero_grad(set_to_none=True)
            (-loss).backward()  # gradient ASCENT on the cross-entropy of the true label
            opt.step()
            used += 1
        with torch.no_grad():
            bg = (background()[0].permute(1, 2, 0) * 255.0).numpy().astype(np.float32)
        if not self.early_stop and hasattr(model, "predict_logits"):  # report success on the saved bytes
            saved = blend_background(sample.image, bg, mask, 1.0, band)
            fooled = int(np.argmax(model.predict_logits([saved])[0])) != int(sample.label)
        return bg, {"iterations": used, "fooled": bool(fooled), "loss_start": round(float(first_loss), 4),
                    "loss": round(loss_value, 4)}

    def apply(self, sample: Sample, params: dict[str, Any]) -> Sample:
        bg, record = self.optimise(sample, params)
        image = blend_background(sample.image, bg, self.object_mask(sample), 1.0, self.band(sample))
        meta = {**sample.meta, "background_shift": self.name, "attack": record}
        return sample.replace(image=image, meta=meta)
