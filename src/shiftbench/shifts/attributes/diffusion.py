"""Diffusion backend of the attribute shifts: Pascal-EA's mask-guided attention editing in diffusers.

The rule (REFERENCE.md section 2), in every attention layer of the UNet decoder (``up_blocks``):

    A = softmax((Q K^T + R ⊙ φ(S')) / sqrt(d)),   S'(i) = 0 inside the object mask, -inf outside

with φ(S') = 1 + S' (1 inside, -inf outside) and the convention 0 · (-inf) = 0, so only pairs with
R ≠ 0 get a bias:

- cross-attention: R(i, j) = c for the text tokens j of the object words (the inserted attribute and
  the subject), 0 otherwise. Inside the mask those scores gain +c (c = the variation degree, the edit
  strength); outside the mask they are -inf, so pixels outside the object never attend to them.
- self-attention: R(i, j) = 1 when both pixels i and j are inside the mask: object pixels attend a
  little more to each other; other pairs are unchanged.

The editor inverts the source image with DDIM under the source caption, then denoises under the
edited caption with the processors installed, injecting the source branch's decoder features
(plug-and-play) during the first ``inject`` fraction of steps, blending the latents outside the mask
back to the source trajectory for local edits, and, when a segmentation ControlNet is given,
conditioning on the object's mask to hold the layout. Local edits get the original pixels pasted back
outside the mask. Everything runs under ``torch.inference_mode``: no gradients.

Real weights come only from a hub id or folder the user gives; tests build tiny random components.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from ...errors import ShiftbenchError
from ...install import install_command

__all__ = ["MaskGuidance", "MaskGuidedAttnProcessor", "install_mask_guided_attention", "token_indices",
           "attention_bias", "AttributeEditor"]


@dataclass
class MaskGuidance:
    """State shared by the processors of one UNet: the mask, the object tokens and c.

    ``mask`` is a bool tensor (H, W) at any resolution (it is resized to each attention map);
    ``latent_hw`` the UNet input's (h, w), from which each layer's map size is found; ``rows`` a bool
    tensor over the batch saying which items get the cross-attention bias (the conditional half under
    classifier-free guidance; None = all). ``enabled`` switches the rule off (the source branch).
    """

    mask: torch.Tensor
    token_indices: list[int]
    c: float
    latent_hw: tuple[int, int]
    rows: torch.Tensor | None = None
    enabled: bool = True
    record: bool = False
    last_probs: dict[str, torch.Tensor] = field(default_factory=dict)
    grad_seen: list[bool] = field(default_factory=list)

    def inside(self, seq_len: int) -> torch.Tensor:
        """The mask at the attention map's size, flattened to (seq_len,)."""
        H, W = self.latent_hw
        s = math.sqrt(H * W / seq_len)
        h, w = max(1, round(H / s)), max(1, round(W / s))
        if h * w != seq_len:
            raise RuntimeError(f"attention map of {seq_len} tokens does not fit latents {H}x{W}")
        m = F.interpolate(self.mask[None, None].float(), size=(h, w), mode="area")[0, 0]
        inside = m > 0.5
        if not inside.any():  # a small object vanishes at coarse maps: keep any touched cell
            inside = m > 0
        return inside.reshape(-1)


def attention_bias(inside: torch.Tensor, key_len: int, cross: bool, token_idx: Sequence[int], c: float) -> torch.Tensor:
    """B = R ⊙ φ(S') as a (seq_len, key_len) float tensor (see the module docstring)."""
    n = inside.shape[0]
    if cross:
        r = torch.zeros(key_len, device=inside.device)
        idx = [i for i in token_idx if 0 <= i < key_len]
        r[idx] = float(c)
        active = (r != 0)[None, :].expand(n, key_len)
        inside_rows = inside[:, None].expand(n, key_len)
        return torch.where(active, torch.where(inside_rows, r[None, :].expand(n, key_len),
                                               torch.tensor(float("-inf"), device=inside.device)),
                           torch.zeros((), device=inside.device))
    if key_len != n:
        raise RuntimeError(f"self-attention with {n} queries and {key_len} keys")
    return (inside[:, None] & inside[None, :]).float()


class MaskGuidedAttnProcessor:
    """A diffusers attention processor applying the mask-guided rule (plain attention otherwise)."""

    def __init__(self, guidance: MaskGuidance, name: str = ""):
        self.guidance = guidance
        self.name = name

    def __call__(self, attn: Any, hidden_states: torch.Tensor, encoder_hidden_states: torch.Tensor | None = None,
                 attention_mask: torch.Tensor | None = None, temb: torch.Tensor | None = None, *args: Any,
                 **kwargs: Any) -> torch.Tensor:
        g = self.guidance
        g.grad_seen.append(torch.is_grad_enabled())
        residual = hidden_states
        if attn.spatial_norm is not None:
            hidden_states = attn.spatial_norm(hidden_states, temb)
        input_ndim = hidden_states.ndim
        if input_ndim == 4:
            b, ch, hh, ww = hidden_states.shape
            hidden_states = hidden_states.view(b, ch, hh * ww).transpose(1, 2)
        batch, seq_len, _ = hidden_states.shape
        if attn.group_norm is not None:
            hidden_states = attn.group_norm(hidden_states.transpose(1, 2)).transpose(1, 2)
        cross = encoder_hidden_states is not None
        query = attn.to_q(hidden_states)
        context = hidden_states if not cross else (
            attn.norm_encoder_hidden_states(encoder_hidden_states) if attn.norm_cross else encoder_hidden_states)
        key, value = attn.to_k(context), attn.to_v(context)
        q, k, v = attn.head_to_batch_dim(query), attn.head_to_batch_dim(key), attn.head_to_batch_dim(value)
        scores = torch.bmm(q.float(), k.float().transpose(-1, -2))
        if attention_mask is not None:
            mask = attn.prepare_attention_mask(attention_mask, k.shape[1], batch)
            scores = scores + mask.float() / attn.scale
        if g.enabled:
            bias = attention_bias(g.inside(seq_len).to(scores.device), k.shape[1], cross, g.token_indices, g.c)
            heads = attn.heads
            if cross and g.rows is not None:
                rows = g.rows.to(scores.device).repeat_interleave(heads)[:, None, None]
                scores = torch.where(rows, scores + bias[None], scores)
            else:
                scores = scores + bias[None]
        probs = (scores * attn.scale).softmax(dim=-1).to(q.dtype)
        if g.record:
            g.last_probs[self.name] = probs.detach()
        out = attn.batch_to_head_dim(torch.bmm(probs, v))
        out = attn.to_out[1](attn.to_out[0](out))
        if input_ndim == 4:
            out = out.transpose(-1, -2).reshape(b, ch, hh, ww)
        if attn.residual_connection:
            out = out + residual
        return out / attn.rescale_output_factor


def install_mask_guided_attention(unet: Any, guidance: MaskGuidance, blocks: str = "up_blocks") -> list[str]:
    """Put the mask-guided processor on every attention layer under ``blocks`` (the decoder by default);
    other layers keep theirs. Returns the names of the layers changed."""
    processors = {}
    changed = []
    for name, proc in unet.attn_processors.items():
        if name.startswith(blocks):
            processors[name] = MaskGuidedAttnProcessor(guidance, name)
            changed.append(name)
        else:
            processors[name] = proc
    if not changed:
        raise ShiftbenchError(f"the UNet has no attention layers under {blocks!r}")
    unet.set_attn_processor(processors)
    return changed


def token_indices(tokenizer: Any, prompt: str, words: Sequence[str]) -> list[int]:
    """Positions (in the padded, special-token-wrapped sequence) of the tokens spelling ``words``."""
    spans = []
    for word in words:
        for m in re.finditer(r"(?<![\w-])" + re.escape(word) + r"(?![\w-])", prompt, flags=re.IGNORECASE):
            spans.append((m.start(), m.end()))
    if not spans:
        return []
    enc = tokenizer(prompt, padding="max_length", max_length=tokenizer.model_max_length, truncation=True,
                    return_offsets_mapping=True)
    out = []
    for i, (a, b) in enumerate(enc["offset_mapping"]):
        if b > a and any(a < e and s < b for s, e in spans):
            out.append(i)
    return out


@dataclass(frozen=True)
class EditSettings:
    """How :meth:`AttributeEditor.edit` edits: ``c`` the variation degree, ``seed`` (recorded for provenance: DDIM
    with eta = 0 draws nothing), DDIM ``steps``, ``guidance`` (classifier-free), ``local`` (the outside kept)."""

    c: float = 2.0
    seed: int = 0
    steps: int = 20
    guidance: float = 7.5
    local: bool = True


class AttributeEditor:
    """Mask-guided attribute editing with Stable-Diffusion-style components (module docstring), on the UNet's device."""

    def __init__(self, unet: Any, vae: Any, text_encoder: Any, tokenizer: Any, scheduler: Any,
                 controlnet: Any = None, resolution: int = 512, inject: float = 0.5):
        self.unet, self.vae, self.text_encoder, self.tokenizer = unet, vae, text_encoder, tokenizer
        self.scheduler, self.controlnet = scheduler, controlnet
        self.resolution, self.inject, self.device = int(resolution), float(inject), next(unet.parameters()).device
        self.vae_scale = 2 ** (len(vae.config.block_out_channels) - 1)
        for m in (unet, vae, text_encoder, controlnet):
            if m is not None:
                m.to(self.device).eval().requires_grad_(False)

    @classmethod
    def from_pretrained(cls, model: str, controlnet: str | None = None, device: str = "cpu", **kw: Any) -> "AttributeEditor":
        """Load components from a Stable Diffusion hub id or local folder (and a ControlNet's)."""
        try:
            from diffusers import AutoencoderKL, ControlNetModel, DDIMScheduler, UNet2DConditionModel
            from transformers import AutoTokenizer, CLIPTextModel
        except ImportError as exc:  # pragma: no cover - optional extra
            raise ShiftbenchError(f"backend='diffusion' needs diffusers and transformers ({exc}); "
                                  f"{install_command('gen')}") from None
        try:
            parts = dict(
                unet=UNet2DConditionModel.from_pretrained(model, subfolder="unet"),
                vae=AutoencoderKL.from_pretrained(model, subfolder="vae"),
                text_encoder=CLIPTextModel.from_pretrained(model, subfolder="text_encoder"),
                tokenizer=AutoTokenizer.from_pretrained(model, subfolder="tokenizer", use_fast=True),
                scheduler=DDIMScheduler.from_pretrained(model, subfolder="scheduler"),
                controlnet=ControlNetModel.from_pretrained(controlnet) if controlnet else None,
            )
        except (OSError, ValueError) as exc:
            raise ShiftbenchError(f"cannot load diffusion model {model!r}: {exc}".splitlines()[0]) from None
        parts["unet"].to(device)  # the editor's device, where the others follow
        return cls(**parts, **kw)

    # -- pieces -------------------------------------------------------------------------------
    def _embed(self, prompt: str) -> torch.Tensor:
        ids = self.tokenizer(prompt, padding="max_length", max_length=self.tokenizer.model_max_length,
                             truncation=True, return_tensors="pt").input_ids.to(self.device)
        return self.text_encoder(ids)[0]

    def _size(self, h: int, w: int) -> tuple[int, int]:
        step = self.vae_scale * 2 ** (len(self.unet.config.block_out_channels) - 1)
        s = self.resolution / max(h, w)
        return max(step, int(round(h * s / step)) * step), max(step, int(round(w * s / step)) * step)

    def _eps(self, z: torch.Tensor, t: Any, emb: torch.Tensor, cond_image: torch.Tensor | None) -> torch.Tensor:
        extra = {}
        if self.controlnet is not None and cond_image is not None:
            down, mid = self.controlnet(z, t, encoder_hidden_states=emb,
                                        controlnet_cond=cond_image.expand(z.shape[0], -1, -1, -1), return_dict=False)
            extra = {"down_block_additional_residuals": down, "mid_block_additional_residual": mid}
        return self.unet(z, t, encoder_hidden_states=emb, **extra).sample

    def _alpha(self, t: int) -> torch.Tensor:
        ac = self.scheduler.alphas_cumprod
        return ac[t] if t >= 0 else self.scheduler.final_alpha_cumprod

    @torch.inference_mode()
    def edit(self, image: np.ndarray, mask: np.ndarray, source_prompt: str, target_prompt: str,
             object_words: Sequence[str], **settings: Any) -> np.ndarray:
        """Edit ``image`` (HxWx3 uint8) inside ``mask`` as ``settings`` say (:class:`EditSettings`); HxWx3 uint8 out."""
        import cv2

        how = EditSettings(**settings)
        if image.ndim != 3 or image.shape[2] != 3 or image.dtype != np.uint8:
            raise ShiftbenchError(f"edit needs an HxWx3 uint8 image, got {image.dtype} {image.shape}")
        mask = np.asarray(mask).astype(bool)
        if mask.shape != image.shape[:2] or not mask.any():
            raise ShiftbenchError("edit needs a non-empty mask of the image's size")
        H, W = image.shape[:2]
        h, w = self._size(H, W)
        x = cv2.resize(image, (w, h), interpolation=cv2.INTER_AREA).astype(np.float32) / 127.5 - 1.0
        x = torch.from_numpy(x).permute(2, 0, 1)[None].to(self.device)
        m_img = torch.from_numpy(cv2.resize(mask.astype(np.uint8), (w, h), interpolation=cv2.INTER_NEAREST) > 0)
        sf = float(getattr(self.vae.config, "scaling_factor", 0.18215))
        z0 = self.vae.encode(x).latent_dist.mean * sf
        lh, lw = z0.shape[-2:]
        m_lat = F.interpolate(m_img[None, None].float(), size=(lh, lw), mode="area").to(self.device)
        cond_image = None
        if self.controlnet is not None:  # the segmentation condition: the object in white on black
            cond_image = m_img[None, None].float().expand(1, 3, h, w).to(self.device)

        src_emb = self._embed(source_prompt)
        tgt_emb = self._embed(target_prompt)
        unc_emb = self._embed("")
        tok = token_indices(self.tokenizer, target_prompt, object_words)
        self.scheduler.set_timesteps(int(how.steps))
        timesteps = [int(t) for t in self.scheduler.timesteps]

        guide = MaskGuidance(mask=m_img.to(self.device), token_indices=tok, c=float(how.c), latent_hw=(lh, lw),
                             rows=torch.tensor([False, True]))
        original = dict(self.unet.attn_processors)
        install_mask_guided_attention(self.unet, guide)
        feats = _FeatureInjector(self.unet)
        try:
            # DDIM inversion of the source (rule off, no guidance): z_0 -> z_T, keeping the trajectory
            guide.enabled = False
            traj = [z0]
            z = z0
            for i, t in enumerate(reversed(timesteps)):
                prev = timesteps[len(timesteps) - i] if i > 0 else -1
                eps = self._eps(z, t, src_emb, cond_image)
                a_prev, a_t = self._alpha(prev), self._alpha(t)
                x0 = (z - (1 - a_prev).sqrt() * eps) / a_prev.sqrt()
                z = a_t.sqrt() * x0 + (1 - a_t).sqrt() * eps
                traj.append(z)
            traj = traj[::-1]  # traj[i] is the latent before denoising step i
            # DDIM with eta = 0 from the inverted latent is deterministic: ``seed`` is recorded for
            # provenance, and no global RNG is touched
            z = traj[0]
            n_inject = int(round(self.inject * len(timesteps)))
            for i, t in enumerate(timesteps):
                if i < n_inject:  # plug-and-play: record the source branch's decoder features
                    guide.enabled = False
                    feats.mode = "record"
                    self._eps(traj[i], t, src_emb, cond_image)
                    feats.mode = "inject"
                guide.enabled = True
                eps_u, eps_c = self._eps(torch.cat([z, z]), t, torch.cat([unc_emb, tgt_emb]), cond_image).chunk(2)
                feats.mode = "off"
                eps = eps_u + float(how.guidance) * (eps_c - eps_u)
                z = self.scheduler.step(eps, t, z).prev_sample
                if how.local:  # outside the object the latents follow the source trajectory
                    z = m_lat * z + (1 - m_lat) * traj[i + 1]
            out = self.vae.decode(z / sf).sample
        finally:
            feats.remove()
            self.unet.set_attn_processor(original)
        out = ((out[0].permute(1, 2, 0).float().cpu().numpy() + 1.0) * 127.5).clip(0, 255).round().astype(np.uint8)
        out = cv2.resize(out, (W, H), interpolation=cv2.INTER_CUBIC if H * W > h * w else cv2.INTER_AREA)
        if how.local:
            out[~mask] = image[~mask]
        return out


class _FeatureInjector:
    """Forward hooks on the decoder's resnets: record the source branch's output, then hand it to both
    halves of the edited batch (plug-and-play feature injection)."""

    def __init__(self, unet: Any):
        block = unet.up_blocks[min(1, len(unet.up_blocks) - 1)]
        self.mode = "off"
        self.store: dict[int, torch.Tensor] = {}
        self.handles = [r.register_forward_hook(self._hook(i)) for i, r in enumerate(block.resnets)]

    def _hook(self, i: int):
        def hook(module, inputs, output):
            if self.mode == "record":
                self.store[i] = output.detach()
            elif self.mode == "inject" and i in self.store:
                src = self.store[i]
                return src.expand(output.shape[0], *src.shape[1:]).clone()
            return None

        return hook

    def remove(self) -> None:
        for h in self.handles:
            h.remove()
