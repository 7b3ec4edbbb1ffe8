"""Diffusion backgrounds on tiny random components built from config (no weights): background_inpaint and
adversarial_diffusion (Algorithm 1). Mechanics only: object pixels kept, seeding, gradients to z_t and e_T,
the loss rising over iterations."""

from __future__ import annotations

import numpy as np
import pytest

import shiftbench as sb
from shiftbench.errors import ShiftbenchError

from conftest import make_sample

torch = pytest.importorskip("torch")
diffusers = pytest.importorskip("diffusers")
transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")


pytestmark = pytest.mark.usefixtures("one_thread")


def _tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    vocab = {"[PAD]": 0, "[UNK]": 1, "[BOS]": 2, "[EOS]": 3}
    for w in "this is a picture of vivid red green blue colorful background tabby cat textures in the".split():
        vocab.setdefault(w, len(vocab))
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(single="[BOS] $A [EOS]", special_tokens=[("[BOS]", 2), ("[EOS]", 3)])
    return transformers.PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="[PAD]", unk_token="[UNK]",
                                                bos_token="[BOS]", eos_token="[EOS]", model_max_length=12)


@pytest.fixture(scope="module")
def parts():
    from shiftbench.shifts.background.diffusion import Components

    torch.manual_seed(0)
    unet = diffusers.UNet2DConditionModel(
        sample_size=8, in_channels=9, out_channels=4, layers_per_block=1, block_out_channels=(8, 16),
        down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"), up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"),
        cross_attention_dim=16, norm_num_groups=4, attention_head_dim=2)
    vae = diffusers.AutoencoderKL(in_channels=3, out_channels=3, latent_channels=4, block_out_channels=(8, 16),
                                  down_block_types=("DownEncoderBlock2D",) * 2, up_block_types=("UpDecoderBlock2D",) * 2,
                                  norm_num_groups=4, layers_per_block=1)
    text = transformers.CLIPTextModel(transformers.CLIPTextConfig(
        vocab_size=32, hidden_size=16, intermediate_size=24, num_hidden_layers=1, num_attention_heads=2,
        max_position_embeddings=12, bos_token_id=2, eos_token_id=3, pad_token_id=0))
    sched = diffusers.DDIMScheduler(beta_schedule="scaled_linear", beta_start=0.00085, beta_end=0.012,
                                    clip_sample=False, set_alpha_to_one=False, steps_offset=1)
    for m in (unet, vae, text):
        m.eval().requires_grad_(False)
    return Components(unet=unet, vae=vae, text_encoder=text, tokenizer=_tokenizer(), scheduler=sched)


class TinyClassifier:
    """A differentiable 4-class classifier: a fixed linear map of pooled colour, in ``forward_images`` form."""

    name = "tiny"
    label_space = None

    def __init__(self):
        g = torch.Generator().manual_seed(0)
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.head = torch.nn.Linear(8, 4)
        with torch.no_grad():
            for p in list(self.conv.parameters()) + list(self.head.parameters()):
                p.copy_(torch.randn(p.shape, generator=g))
            self.conv.requires_grad_(False)
            self.head.requires_grad_(False)

    def forward_images(self, x01):
        return self.head(torch.relu(self.conv(x01 * 2 - 1)).mean(dim=(2, 3)))


def _sample():
    s = make_sample(40, 48, seed=3, sid="d0")
    return s.replace(label=1)


def test_inpaint_keeps_the_object_and_is_seeded(parts):
    s = _sample()
    shift = sb.create_shift("background_inpaint", model=parts, prompt="color1", steps=3, size=32)
    out, params = shift(s, seed=0, return_params=True)
    assert params["prompt"] == "This is a picture of a vivid red background"
    assert out.image.shape == s.image.shape and out.image.dtype == np.uint8
    assert np.array_equal(out.image[s.mask], s.image[s.mask])
    assert not np.array_equal(out.image[~s.mask], s.image[~s.mask])
    assert np.array_equal(shift(s, seed=0).image, out.image)  # same seed, same bytes
    assert not np.array_equal(shift(s, seed=1).image, out.image)
    assert np.array_equal(shift.replay(s, params).image, out.image)
    # batched with another image: each keeps its object, and the result is the single one up to rounding
    other = make_sample(40, 48, seed=4, sid="d1")
    batch = shift([s, other], seed=0)
    assert np.array_equal(batch[1].image[other.mask], other.image[other.mask])
    assert np.abs(batch[0].image.astype(int) - out.image.astype(int)).max() <= 2


def test_inpaint_prompts_and_captions(parts):
    s = _sample()
    cls = sb.create_shift("background_inpaint", model=parts, prompt="class_label", steps=1, size=32, guidance=1.0)
    assert cls.draw(s, seed=0)["prompt"] == "This is a picture of a tabby cat"
    cap = sb.create_shift("background_inpaint", model=parts, prompt="caption", steps=1, size=32)
    assert cap.draw(s, seed=0)["prompt"] == s.caption
    with pytest.raises(ShiftbenchError, match="no placeholder"):
        cap.draw(s.replace(caption=None), seed=0)
    templ = sb.create_shift("background_inpaint", model=parts, prompt="caption", captioner="template", steps=1, size=32)
    assert templ.draw(s.replace(caption=None), seed=0)["prompt"] == "a photo of a tabby cat"
    own = sb.create_shift("background_inpaint", model=parts, prompt="caption", steps=1, size=32,
                          captioner={"name": "template", "template": "{class_name} seen from {article} distance"})
    assert own.draw(s, seed=0)["prompt"] == "tabby cat seen from a distance"  # a captioner beats the stored caption
    with pytest.raises(ShiftbenchError, match="unknown prompt"):
        sb.create_shift("background_inpaint", model=parts, prompt="colour7")
    with pytest.raises(ShiftbenchError, match="multiple of 8"):
        sb.create_shift("background_inpaint", model=parts, size=30)


def test_inpaint_refuses_a_non_inpainting_unet(parts):
    from shiftbench.shifts.background.diffusion import Components

    torch.manual_seed(0)
    plain = diffusers.UNet2DConditionModel(
        sample_size=8, in_channels=4, out_channels=4, layers_per_block=1, block_out_channels=(8, 16),
        down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"), up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"),
        cross_attention_dim=16, norm_num_groups=4, attention_head_dim=2)
    bad = Components(plain, parts.vae, parts.text_encoder, parts.tokenizer, parts.scheduler)
    with pytest.raises(ShiftbenchError, match="9-channel"):
        sb.create_shift("background_inpaint", model=bad, size=32)(_sample(), seed=0)


def test_adversarial_diffusion_raises_the_loss_through_both_zt_and_et(parts, monkeypatch):
    s = _sample()
    clf = TinyClassifier()
    shift = sb.create_shift("adversarial_diffusion", model=parts, classifier=clf, steps=6, start=2, iterations=5,
                            size=32, guidance=2.0, lr=0.5)
    grads = []
    real_step = torch.optim.AdamW.step

    def spy(opt, *a, **k):
        grads.append([None if p.grad is None else float(p.grad.abs().sum()) for p in opt.param_groups[0]["params"]])
        return real_step(opt, *a, **k)

    monkeypatch.setattr(torch.optim.AdamW, "step", spy)
    out = shift(s, seed=0)
    assert len(grads) == 5 and all(g[0] and g[1] for g in grads)  # z_t and e_T both get gradients
    losses = shift.history
    assert len(losses) == 5 and losses[-1] > losses[0]
    assert np.array_equal(out.image[s.mask], s.image[s.mask])
    assert out.meta["attack"]["loss"] == [round(v, 4) for v in losses]


def test_adversarial_diffusion_checkpointing_gives_the_same_gradients(parts):
    s = _sample()
    clf = TinyClassifier()
    a = sb.create_shift("adversarial_diffusion", model=parts, classifier=clf, steps=4, start=1, iterations=2,
                        size=32, checkpoint=True)
    b = sb.create_shift("adversarial_diffusion", model=parts, classifier=clf, steps=4, start=1, iterations=2,
                        size=32, checkpoint=False)
    assert np.allclose(a(s, seed=0).image.astype(int), b(s, seed=0).image.astype(int), atol=1)
    assert np.allclose(a.history, b.history, rtol=1e-4)
    feat = sb.create_shift("adversarial_diffusion", model=parts, classifier=clf, steps=4, start=1, iterations=2,
                           size=32, objective="features")
    out = feat(s.replace(label=None), seed=0)
    assert np.array_equal(out.image[s.mask], s.image[s.mask])
    with pytest.raises(ShiftbenchError, match="needs a label"):
        a(s.replace(label=None), seed=0)
    with pytest.raises(ShiftbenchError, match="start must be"):
        sb.create_shift("adversarial_diffusion", model=parts, start=20)


def test_missing_weights_give_a_clear_error(tmp_path):
    shift = sb.create_shift("background_inpaint", model=str(tmp_path / "nothing-here"), size=32)
    with pytest.raises(ShiftbenchError, match="cannot load diffusion model"):
        shift(_sample(), seed=0)


def test_background_only_with_the_diffusion_fill(parts):
    from shiftbench.conditioning.masks import dilate

    s = _sample()
    shift = sb.create_shift("background_only", fill="diffusion", diffusion={"model": parts, "steps": 2, "size": 32})
    out, params = shift(s, seed=0, return_params=True)
    hole = dilate(s.mask, shift.dilation)
    assert np.array_equal(out.image[~hole], s.image[~hole])  # the rest of the picture untouched
    assert not np.array_equal(out.image[s.mask], s.image[s.mask])  # the object is gone
    assert params["prompt"] == "an empty background"
    assert np.array_equal(shift.replay(s, params).image, out.image)
    with pytest.raises(ShiftbenchError, match="needs diffusion="):
        sb.create_shift("background_only", fill="diffusion")
