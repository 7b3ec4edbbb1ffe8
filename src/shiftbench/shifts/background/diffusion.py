"""Diffusion backgrounds: Stable Diffusion inpainting (``background_inpaint``) and ObjectCompose's Algorithm 1
(``adversarial_diffusion``), written out over diffusers components so the whole pipeline reads in one file.

Components: a 9-channel inpainting ``UNet2DConditionModel``, an ``AutoencoderKL``, a CLIP text encoder and
tokenizer, and a DDIM scheduler, loaded from a hub id or local folder in diffusers' layout (``unet/``,
``vae/``, ``text_encoder/``, ``tokenizer/``, ``scheduler/``), or passed in as a :class:`Components`
(how the tests build tiny random ones). Real weights are only loaded when the user names them; the
default id is ``stabilityai/stable-diffusion-2-inpainting`` (guidance 7.5, DDIM 20 steps, 512 px).

Masks: an estimated object mask is dilated (6 px, elliptical) and everything outside it is regenerated;
an exact one (the sample's own, ``BackgroundShift.band``) is not dilated. The generated picture is resized
back to the sample's size and laid behind the object exactly as the ``compose`` backend does (a feathered
band around an estimated mask, none around an exact one; original pixels pasted back inside the mask).
Prompts: a prompt name of the ObjectCompose sets (``class_label``, ``caption``, ``color1``..``color4``,
``texture1``..``texture4``) or a sentence. ``caption`` uses the sample's caption, else the ``captioner``
(``template``, ``blip2``, or ``{"name": "blip2", "model": FOLDER}``); with neither it raises instead of prompting with a placeholder. Masks and
captions are cached by image content, so one image is conditioned once however many prompts run.
Noise is seeded per sample (a seed drawn in ``sample_params``). A batch runs through the UNet together,
which changes float rounding slightly compared with one image at a time.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import InitVar, dataclass, fields
from typing import Any, ClassVar, Sequence

import numpy as np

from ...conditioning.captions import create_captioner
from ...conditioning.masks import dilate
from ...conditioning.prompts import resolve_prompt
from ...errors import ShiftbenchError
from ...install import install_command
from ...resize import LIMIT, MAX_SHORTER
from ...sample import Sample
from .adversarial import source_classifier
from .base import BackgroundShift, blend_background, feather_alpha

__all__ = ["Components", "load_components", "BackgroundInpaint", "ObjectRemoval", "AdversarialDiffusion",
           "DEFAULT_MODEL"]

DEFAULT_MODEL = "stabilityai/stable-diffusion-2-inpainting"
_COMPONENTS: dict[tuple, "Components"] = {}
_CAPTIONS: OrderedDict[tuple, str] = OrderedDict()


@dataclass
class Components:
    """The parts of a latent-diffusion inpainting model (all torch modules on one device and dtype)."""

    unet: Any
    vae: Any
    text_encoder: Any
    tokenizer: Any
    scheduler: Any

    @property
    def device(self) -> Any:
        return next(self.unet.parameters()).device

    @property
    def dtype(self) -> Any:
        return next(self.unet.parameters()).dtype

    @property
    def vae_scale(self) -> int:
        return 2 ** (len(self.vae.config.block_out_channels) - 1)

    def encode_prompts(self, texts: Sequence[str]) -> Any:
        """CLIP text embeddings (B, L, D) of ``texts``, padded to the tokenizer's maximum length."""
        import torch

        tokens = self.tokenizer(list(texts), padding="max_length", truncation=True,
                                max_length=self.tokenizer.model_max_length, return_tensors="pt")
        with torch.no_grad():
            out = self.text_encoder(tokens.input_ids.to(self.device))
        return out[0].to(self.dtype)


def load_components(model: Any = DEFAULT_MODEL, device: str = "cpu", dtype: str = "float32") -> Components:
    """Components from a hub id / local folder (cached per process), or ``model`` itself if it is one."""
    if isinstance(model, Components):
        return model
    if not isinstance(model, str) or not model:
        raise ShiftbenchError(f"model must be a hub id, a local folder or Components, got {model!r}")
    key = (model, device, dtype)
    if key not in _COMPONENTS:
        try:
            import diffusers
            import torch
            import transformers
        except ImportError:
            raise ShiftbenchError(f"diffusion backgrounds need: {install_command('gen')}") from None
        torch_dtype = getattr(torch, dtype, None)
        if dtype not in ("float32", "float16", "bfloat16") or torch_dtype is None:
            raise ShiftbenchError(f"dtype must be float32, float16 or bfloat16, got {dtype!r}")
        try:
            parts = Components(
                unet=diffusers.UNet2DConditionModel.from_pretrained(model, subfolder="unet", torch_dtype=torch_dtype),
                vae=diffusers.AutoencoderKL.from_pretrained(model, subfolder="vae", torch_dtype=torch_dtype),
                text_encoder=transformers.CLIPTextModel.from_pretrained(model, subfolder="text_encoder",
                                                                        torch_dtype=torch_dtype),
                tokenizer=transformers.AutoTokenizer.from_pretrained(model, subfolder="tokenizer"),
                scheduler=diffusers.DDIMScheduler.from_pretrained(model, subfolder="scheduler"),
            )
        except (OSError, ValueError) as exc:
            raise ShiftbenchError(f"cannot load diffusion model {model!r}: {str(exc).splitlines()[0]}") from None
        for m in (parts.unet, parts.vae, parts.text_encoder):
            m.to(device).eval().requires_grad_(False)
        _COMPONENTS[key] = parts
    return _COMPONENTS[key]


@dataclass(frozen=True)
class Sampler:
    """The sampler, checked once: ``model`` (hub id, local folder or Components), classifier-free ``guidance`` >= 1,
    DDIM ``steps`` in 1..1000, the ``size`` x ``size`` picture generated, ``device`` / ``dtype`` (float16 on a GPU)."""

    model: Any = DEFAULT_MODEL
    guidance: float = 7.5
    steps: int = 20
    size: int = 512
    device: str = "cpu"
    dtype: str = "float32"

    def __post_init__(self) -> None:
        guidance, steps, size = self.guidance, self.steps, self.size
        if not isinstance(guidance, (int, float)) or isinstance(guidance, bool) or guidance < 1.0:
            raise ShiftbenchError(f"guidance must be a number >= 1, got {guidance!r}")
        if isinstance(steps, bool) or not isinstance(steps, int) or not 1 <= steps <= 1000:
            raise ShiftbenchError(f"steps must be an int in 1..1000, got {steps!r}")
        if isinstance(size, bool) or not isinstance(size, int) or not 16 <= size <= MAX_SHORTER or size % 8:
            # a size x size picture: within the one limit on image sizes (resize.LIMIT)
            raise ShiftbenchError(f"size must be a multiple of 8 px in 16..{MAX_SHORTER} (the generated picture is "
                                  f"size x size, within {LIMIT}), got {size!r}")
        object.__setattr__(self, "guidance", float(guidance))


@dataclass(frozen=True)
class Attack:
    """Algorithm 1's settings (see AdversarialDiffusion), checked once; ``start`` against the sampler's ``steps``."""

    classifier: Any = "efficientnet_lite0"
    start: int = 4
    iterations: int = 30
    lr: float = 0.1
    objective: str = "ce"
    checkpoint: bool = True
    steps: InitVar[int] = Sampler.steps

    def __post_init__(self, steps: int) -> None:
        start, iterations = self.start, self.iterations
        if isinstance(start, bool) or not isinstance(start, int) or not 0 <= start < steps:
            raise ShiftbenchError(f"start must be an int in 0..{steps - 1}, got {start!r}")
        if isinstance(iterations, bool) or not isinstance(iterations, int) or not 0 <= iterations <= 1000:
            raise ShiftbenchError(f"iterations must be an int in 0..1000, got {iterations!r}")
        if self.objective not in ("ce", "features"):
            raise ShiftbenchError(f"objective must be 'ce' or 'features', got {self.objective!r}")
        object.__setattr__(self, "lr", float(self.lr))
        object.__setattr__(self, "checkpoint", bool(self.checkpoint))


def _check_components(parts: Components) -> None:
    if parts.unet.config.in_channels != 9:
        raise ShiftbenchError(f"background_inpaint needs a 9-channel inpainting UNet, got {parts.unet.config.in_channels} "
                              "input channels")


class _DiffusionBackground(BackgroundShift):
    """Shared set-up of the two diffusion shifts: components, prompts, captions, latents of the masked image."""

    severities: ClassVar[tuple[int, int]] = (1, 1)
    default_severity: ClassVar[int | None] = 1
    region: ClassVar[str] = "background"  # what is regenerated: "background", or "object" (removal)

    def __init__(self, model: Any = DEFAULT_MODEL, prompt: str = "class_label", *, captioner: Any = None,
                 mask: str = "auto", dilation: int | None = None, mask_options: dict | None = None, **given: Any):
        s = self.sampler = Sampler(model, **{f.name: given.pop(f.name) for f in fields(Sampler) if f.name in given})
        resolve_prompt(prompt, class_name="x", caption="x")  # an unknown prompt name fails now
        self.prompt = prompt  # given's other keywords (AdversarialDiffusion's Attack) are recorded in the config
        if isinstance(captioner, dict):  # {"name": "blip2", "model": "path/to/blip2", ...}
            options = {k: v for k, v in captioner.items() if k != "name"}
            self.captioner = create_captioner(captioner.get("name", "template"), **options)
        else:
            self.captioner = None if captioner is None else create_captioner(captioner)
        model_name = model if isinstance(model, str) else "components"
        super().__init__(mask=mask, dilation=dilation, mask_options=mask_options, model=model_name, prompt=prompt,
                         guidance=s.guidance, steps=s.steps, size=s.size,
                         captioner=captioner if isinstance(captioner, (str, dict)) or captioner is None else "custom",
                         device=s.device, dtype=s.dtype, **given)

    @property
    def parts(self) -> Components:
        parts = load_components(self.sampler.model, self.sampler.device, self.sampler.dtype)
        _check_components(parts)
        return parts

    # -- conditioning -------------------------------------------------------------------------------
    def load_conditioning(self, sample: Sample) -> None:
        """The mask provider, the diffusion components and the captioner, loaded, nothing run."""
        super().load_conditioning(sample)
        self.parts  # noqa: B018 - loads (and caches) the pipeline's components
        if self.captioner is not None and callable(getattr(self.captioner, "load", None)):
            self.captioner.load()

    def caption(self, sample: Sample) -> str:
        if sample.caption and sample.caption.strip() and self.captioner is None:
            return sample.caption
        if self.captioner is None:
            raise ShiftbenchError(f"prompt 'caption': sample {sample.id} has no caption; give captioner='template' "
                                  "or 'blip2' (no placeholder prompt is ever used)")
        import hashlib

        key = (id(self.captioner), hashlib.blake2b(sample.image.tobytes(), digest_size=16).digest())
        if key not in _CAPTIONS:
            _CAPTIONS[key] = self.captioner([sample])[0]
            if len(_CAPTIONS) > 256:
                _CAPTIONS.popitem(last=False)
        return _CAPTIONS[key]

    def prompt_text(self, sample: Sample) -> str:
        caption = self.caption(sample) if self.prompt == "caption" else None
        return resolve_prompt(self.prompt, class_name=(sample.class_name or "").split(",")[0].strip() or None,
                              caption=caption)

    def sample_params(self, sample: Sample, severity: int, rng: np.random.Generator) -> dict[str, Any]:
        self.object_mask(sample)
        return {"weight": 1.0, "seed": int(rng.integers(2**31)), "prompt": self.prompt_text(sample)}

    # -- tensors -----------------------------------------------------------------------------------------
    def _inputs(self, samples: Sequence[Sample]) -> tuple[Any, Any, Any]:
        """(image in [-1, 1], repaint mask (1 = background to regenerate), masked image), each B x C x S x S."""
        import cv2
        import torch

        images, repaint, side = [], [], self.sampler.size
        for s in samples:
            if self.region == "object":  # object removal: regenerate the dilated object, keep the rest
                keep = ~dilate(self.object_mask(s), self.dilation)
            else:  # the object and its band (none around an exact mask): the model never sees the old background
                keep = dilate(self.object_mask(s), self.band(s))
            images.append(cv2.resize(s.image, (side, side), interpolation=cv2.INTER_AREA))
            repaint.append(cv2.resize((~keep).astype(np.uint8), (side, side), interpolation=cv2.INTER_NEAREST))
        parts = self.parts
        x = torch.from_numpy(np.stack(images)).permute(0, 3, 1, 2).to(parts.device, torch.float32) / 127.5 - 1.0
        m = torch.from_numpy(np.stack(repaint)).to(parts.device, torch.float32)[:, None]
        return x, m, x * (1.0 - m)

    def _latent_inputs(self, samples: Sequence[Sample]) -> tuple[Any, Any]:
        """Latent-size repaint mask and the masked image's latents (what the 9-channel UNet is given)."""
        import torch
        import torch.nn.functional as F

        parts = self.parts
        _, m, masked = self._inputs(samples)
        with torch.no_grad():
            lat = parts.vae.encode(masked.to(parts.dtype)).latent_dist.mode() * parts.vae.config.scaling_factor
        side = self.sampler.size // parts.vae_scale
        return F.interpolate(m, size=(side, side)).to(parts.dtype), lat

    def _noise(self, params: Sequence[dict[str, Any]]) -> Any:
        import torch

        parts = self.parts
        side = self.sampler.size // parts.vae_scale
        ch = parts.unet.config.out_channels
        noise = [torch.randn((1, ch, side, side), generator=torch.Generator().manual_seed(int(p["seed"])))
                 for p in params]
        return torch.cat(noise).to(parts.device, parts.dtype)

    def _denoise_step(self, latents: Any, t: Any, text: Any, uncond: Any, mask: Any, masked_latents: Any) -> Any:
        """One guided UNet prediction (classifier-free guidance when guidance > 1)."""
        import torch

        parts = self.parts
        sched, guidance = parts.scheduler, self.sampler.guidance
        if guidance > 1.0:
            lat_in = torch.cat([latents, latents])
            extra = torch.cat([torch.cat([mask, mask]), torch.cat([masked_latents, masked_latents])], dim=1)
            emb = torch.cat([uncond, text])
        else:
            lat_in, extra, emb = latents, torch.cat([mask, masked_latents], dim=1), text
        lat_in = sched.scale_model_input(lat_in, t)
        pred = parts.unet(torch.cat([lat_in, extra], dim=1), t, encoder_hidden_states=emb).sample
        if guidance > 1.0:
            un, co = pred.chunk(2)
            pred = un + guidance * (co - un)
        return pred

    def _decode(self, latents: Any) -> Any:
        parts = self.parts
        return (parts.vae.decode(latents / parts.vae.config.scaling_factor).sample.float().clamp(-1, 1) + 1.0) / 2.0

    def _paste(self, sample: Sample, generated01: np.ndarray) -> np.ndarray:
        import cv2

        h, w = sample.size
        bg = cv2.resize((generated01 * 255.0).astype(np.float32), (w, h), interpolation=cv2.INTER_LINEAR)
        return blend_background(sample.image, bg, self.object_mask(sample), 1.0, self.band(sample))


class BackgroundInpaint(_DiffusionBackground):
    """Stable Diffusion inpainting of everything but the (dilated) object, from a prompt (a prompt name or a
    sentence); object kept exactly. ``model`` and the sampler's keywords (defaults, checks): :class:`Sampler`."""

    def apply(self, sample: Sample, params: dict[str, Any]) -> Sample:
        return self.apply_batch([sample], [params])[0]

    def apply_batch(self, samples: Sequence[Sample], params: Sequence[dict[str, Any]]) -> list[Sample]:
        import torch

        if not samples:
            return []
        parts = self.parts
        mask, masked_latents = self._latent_inputs(samples)
        text = parts.encode_prompts([p["prompt"] for p in params])
        uncond = parts.encode_prompts([""] * len(samples))
        parts.scheduler.set_timesteps(self.sampler.steps, device=parts.device)
        latents = self._noise(params) * parts.scheduler.init_noise_sigma
        with torch.no_grad():
            for t in parts.scheduler.timesteps:
                pred = self._denoise_step(latents, t, text, uncond, mask, masked_latents)
                latents = parts.scheduler.step(pred, t, latents).prev_sample
            images = self._decode(latents).permute(0, 2, 3, 1).cpu().numpy()
        return [s.replace(image=self._paste(s, im), meta={**s.meta, "background_shift": self.name,
                                                           "prompt": p["prompt"]})
                for s, im, p in zip(samples, images, params)]


class ObjectRemoval(BackgroundInpaint):
    """The dilated object regenerated from its surroundings (``background_only`` with ``fill="diffusion"``):
    pixels outside the dilated mask stay the original's byte for byte."""

    region: ClassVar[str] = "object"
    keeps: ClassVar[frozenset[str]] = frozenset({"label"})

    def __init__(self, prompt: str = "an empty background", **kwargs: Any):
        super().__init__(prompt=prompt, **kwargs)

    def _paste(self, sample: Sample, generated01: np.ndarray) -> np.ndarray:
        import cv2

        h, w = sample.size
        gen = cv2.resize((generated01 * 255.0).astype(np.float32), (w, h), interpolation=cv2.INTER_LINEAR)
        hole = dilate(self.object_mask(sample), self.dilation)
        out = sample.image.copy()
        out[hole] = cv2.convertScaleAbs(gen)[hole]
        return out


class AdversarialDiffusion(_DiffusionBackground):
    """ObjectCompose Algorithm 1: DDIM to step ``start`` (4 of 20), then ``iterations`` (30) AdamW steps (lr 0.1)
    on both the latent z_t and the text embedding e_T, each finishing the denoising, decoding, pasting the
    object back and scoring with the source ``classifier`` (default efficientnet_lite0; any object with a
    differentiable ``forward_images``). ``objective="ce"`` maximises the cross-entropy of the true label;
    ``"features"`` maximises the distance between the classifier outputs of the clean and adversarial
    images (for detection data without one label). ``checkpoint=True`` recomputes UNet / VAE activations in
    the backward pass (gradient checkpointing) so that 512 px fits on one GPU.
    """

    option_groups: ClassVar[tuple[type, ...]] = (Sampler, Attack)  # what ``given`` takes (the registry checks the names)

    def __init__(self, model: Any = DEFAULT_MODEL, prompt: str = "class_label", *, captioner: Any = None,
                 mask: str = "auto", dilation: int | None = None, mask_options: dict | None = None, **given: Any):
        sampler = {f.name: given.pop(f.name) for f in fields(Sampler) if f.name in given}
        a = self.attack = Attack(**given, steps=sampler.get("steps", Sampler.steps))  # the rest: Attack's or refused
        super().__init__(model, prompt, captioner=captioner, mask=mask, dilation=dilation, mask_options=mask_options,
                         **sampler, classifier=a.classifier if isinstance(a.classifier, str) else "custom", start=a.start,
                         iterations=a.iterations, lr=a.lr, objective=a.objective, checkpoint=a.checkpoint)
        self.history: list[list[float]] = []  # loss per iteration of the last apply, for inspection

    def check_sample(self, sample: Sample) -> None:
        super().check_sample(sample)
        if self.attack.objective == "ce" and sample.label is None:
            raise ShiftbenchError(f"adversarial_diffusion with objective='ce' needs a label; sample {sample.id} has none")

    def _run(self, fn: Any, *args: Any) -> Any:
        if self.attack.checkpoint:
            from torch.utils.checkpoint import checkpoint

            return checkpoint(fn, *args, use_reentrant=False)
        return fn(*args)

    def apply(self, sample: Sample, params: dict[str, Any]) -> Sample:
        import torch
        import torch.nn.functional as F

        classifier, attack = source_classifier(self.attack.classifier), self.attack
        parts = self.parts
        sched = parts.scheduler
        mask, masked_latents = self._latent_inputs([sample])
        text = parts.encode_prompts([params["prompt"]])
        uncond = parts.encode_prompts([""])
        sched.set_timesteps(self.sampler.steps, device=parts.device)
        timesteps = list(sched.timesteps)
        latents = self._noise([params]) * sched.init_noise_sigma
        with torch.no_grad():
            for t in timesteps[:attack.start]:
                latents = sched.step(self._denoise_step(latents, t, text, uncond, mask, masked_latents), t, latents).prev_sample
        z_t = latents.detach().clone().requires_grad_(True)
        e_t = text.detach().clone().requires_grad_(True)
        opt = torch.optim.AdamW([z_t, e_t], lr=attack.lr)
        # the image at the classifier's input: generated background behind the exact object (a feathered band
        # around an estimated mask only)
        h, w = sample.size
        original = torch.from_numpy(sample.image).permute(2, 0, 1)[None].float().to(parts.device) / 255.0
        alpha = torch.from_numpy(feather_alpha(self.object_mask(sample), self.band(sample)))[None, None]
        alpha = alpha.to(parts.device)
        with torch.no_grad():
            clean_out = classifier.forward_images(original).float()

        def finish(z: Any, e: Any) -> Any:
            lat = z
            for t in timesteps[attack.start:]:
                pred = self._run(lambda a, b, t=t: self._denoise_step(a, t, b, uncond, mask, masked_latents), lat, e)
                lat = sched.step(pred, t, lat).prev_sample
            gen = self._run(self._decode, lat)
            gen = F.interpolate(gen, size=(h, w), mode="bilinear", align_corners=False)
            return original + alpha * (gen - original), gen

        self.history = []
        for _ in range(attack.iterations):
            x, _ = finish(z_t, e_t)
            out = classifier.forward_images(x).float()
            if attack.objective == "ce":
                loss = F.cross_entropy(out, torch.tensor([int(sample.label)], device=out.device))
            else:
                loss = (out - clean_out).pow(2).mean()
            self.history.append(float(loss.detach()))
            opt.zero_grad(set_to_none=True)
            (-loss).backward()  # ascent: make the classifier wrong
            opt.step()
        with torch.no_grad():
            _, gen = finish(z_t, e_t)
        image = blend_background(sample.image, gen[0].permute(1, 2, 0).cpu().numpy() * 255.0, self.object_mask(sample),
                                 1.0, self.band(sample))
        meta = {**sample.meta, "background_shift": self.name, "prompt": params["prompt"],
                "attack": {"iterations": attack.iterations, "loss": [round(v, 4) for v in self.history]}}
        return sample.replace(image=image, meta=meta)
