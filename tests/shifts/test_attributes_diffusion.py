"""Mask-guided attention (Pascal-EA) in diffusers, with tiny random components built from config."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
diffusers = pytest.importorskip("diffusers")
transformers = pytest.importorskip("transformers")

from shiftbench.shifts.attributes.diffusion import (  # noqa: E402
    AttributeEditor, MaskGuidance, MaskGuidedAttnProcessor, attention_bias, install_mask_guided_attention,
    token_indices,
)

WORDS = ["[PAD]", "[UNK]", "<s>", "</s>", "a", "an", "violet", "horse", "on", "the", "grass", "photo", "of", "pencil",
         "sketch", "wooden"]


pytestmark = pytest.mark.usefixtures("one_thread")


def tiny_tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(single="<s> $A </s>", special_tokens=[("<s>", 2), ("</s>", 3)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="[PAD]", unk_token="[UNK]", model_max_length=12)


def tiny_attention(cross: bool):
    from diffusers.models.attention_processor import Attention

    torch.manual_seed(0)
    return Attention(query_dim=8, cross_attention_dim=6 if cross else None, heads=2, dim_head=4).eval()


def _run(attn, guide, x, ctx=None):
    attn.set_processor(MaskGuidedAttnProcessor(guide, "layer"))
    with torch.no_grad():
        out = attn(x, encoder_hidden_states=ctx)
    return out, guide.last_probs.get("layer")


def test_cross_attention_rule_zero_outside_and_c_scales_object_tokens():
    attn = tiny_attention(cross=True)
    mask = torch.zeros(4, 4, dtype=torch.bool)
    mask[1:3, 1:4] = True
    x = torch.randn(1, 16, 8, generator=torch.Generator().manual_seed(1))
    ctx = torch.randn(1, 5, 6, generator=torch.Generator().manual_seed(2))
    inside = mask.reshape(-1)
    logp = {}
    for c in (0.0, 1.0, 3.0):
        guide = MaskGuidance(mask=mask, token_indices=[1, 2], c=c, latent_hw=(4, 4), record=True)
        _, probs = _run(attn, guide, x, ctx)
        if c > 0:  # outside the mask the object tokens get exactly zero attention
            assert torch.all(probs[:, ~inside][:, :, [1, 2]] == 0)
            assert torch.all(probs[:, ~inside][:, :, [0, 3, 4]] > 0)
        logp[c] = probs.double().log()
    # inside the mask: log-odds of an object token against another token grow by c * scale (= c / sqrt(d))
    scale = attn.scale
    for c in (1.0, 3.0):
        delta = (logp[c][:, inside][:, :, 1] - logp[c][:, inside][:, :, 0]) - (
            logp[0.0][:, inside][:, :, 1] - logp[0.0][:, inside][:, :, 0])
        assert torch.allclose(delta, torch.full_like(delta, c * scale), atol=1e-5)
    # with c = 0 the processor is plain attention: compare with diffusers' own processor
    from diffusers.models.attention_processor import AttnProcessor

    guide = MaskGuidance(mask=mask, token_indices=[1, 2], c=0.0, latent_hw=(4, 4), enabled=False)
    ours, _ = _run(attn, guide, x, ctx)
    attn.set_processor(AttnProcessor())
    with torch.no_grad():
        ref = attn(x, encoder_hidden_states=ctx)
    assert torch.allclose(ours, ref, atol=1e-5)


def test_self_attention_rule_boosts_inside_pairs_only():
    attn = tiny_attention(cross=False)
    mask = torch.zeros(4, 4, dtype=torch.bool)
    mask[0:2, 0:2] = True
    inside = mask.reshape(-1)
    x = torch.randn(2, 16, 8, generator=torch.Generator().manual_seed(3))
    _, p1 = _run(attn, MaskGuidance(mask=mask, token_indices=[], c=2.0, latent_hw=(4, 4), record=True), x)
    g0 = MaskGuidance(mask=mask, token_indices=[], c=2.0, latent_hw=(4, 4), record=True, enabled=False)
    _, p0 = _run(attn, g0, x)
    d = p1.double().log() - p0.double().log()
    # per query row, log-probabilities shift by a constant (the normaliser) plus scale on inside keys
    d = d - d[:, :, ~inside].mean(dim=-1, keepdim=True)
    inside_q = d[:, inside]
    assert torch.allclose(inside_q[:, :, inside], torch.full_like(inside_q[:, :, inside], attn.scale), atol=1e-5)
    assert torch.allclose(inside_q[:, :, ~inside], torch.zeros_like(inside_q[:, :, ~inside]), atol=1e-5)
    assert torch.allclose(d[:, ~inside], torch.zeros_like(d[:, ~inside]), atol=1e-5)  # outside queries untouched


def test_bias_matrix_follows_the_equation():
    inside = torch.tensor([True, False, True])
    b = attention_bias(inside, 4, cross=True, token_idx=[2], c=1.5)
    assert b[0].tolist() == [0, 0, 1.5, 0] and b[2].tolist() == [0, 0, 1.5, 0]
    assert b[1, 2] == float("-inf") and b[1, [0, 1, 3]].tolist() == [0, 0, 0]
    s = attention_bias(inside, 3, cross=False, token_idx=[], c=9.0)
    assert s.tolist() == [[1, 0, 1], [0, 0, 0], [1, 0, 1]]


def test_token_indices_of_object_words():
    tok = tiny_tokenizer()
    # "<s> a violet horse on the grass </s> [PAD]..." : violet=2, horse=3
    assert token_indices(tok, "a violet horse on the grass", ["violet", "horse"]) == [2, 3]
    assert token_indices(tok, "a horse", ["zebra"]) == []


def tiny_editor(controlnet: bool = False):
    from diffusers import AutoencoderKL, ControlNetModel, DDIMScheduler, UNet2DConditionModel
    from transformers import CLIPTextConfig, CLIPTextModel

    torch.manual_seed(0)
    unet = UNet2DConditionModel(
        sample_size=8, in_channels=4, out_channels=4, layers_per_block=1, block_out_channels=(8, 16),
        down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"), up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"),
        cross_attention_dim=16, attention_head_dim=4, norm_num_groups=4)
    vae = AutoencoderKL(in_channels=3, out_channels=3, block_out_channels=(8, 16), latent_channels=4,
                        down_block_types=("DownEncoderBlock2D",) * 2, up_block_types=("UpDecoderBlock2D",) * 2,
                        norm_num_groups=4)
    text = CLIPTextModel(CLIPTextConfig(vocab_size=len(WORDS), hidden_size=16, intermediate_size=32,
                                        num_hidden_layers=1, num_attention_heads=2, max_position_embeddings=12,
                                        eos_token_id=3, bos_token_id=2, pad_token_id=0))
    cn = None
    if controlnet:
        cn = ControlNetModel(in_channels=4, block_out_channels=(8, 16), layers_per_block=1,
                             down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"), cross_attention_dim=16,
                             attention_head_dim=4, norm_num_groups=4, conditioning_embedding_out_channels=(4, 8))
    sched = DDIMScheduler(num_train_timesteps=100, beta_schedule="linear", clip_sample=False)
    return AttributeEditor(unet, vae, text, tiny_tokenizer(), sched, controlnet=cn, resolution=16)


@pytest.fixture(scope="module")
def editor():
    return tiny_editor()


def _image_and_mask():
    rng = np.random.default_rng(0)
    img = rng.integers(0, 256, (40, 36, 3), dtype=np.uint8)
    mask = np.zeros((40, 36), bool)
    mask[10:30, 8:26] = True
    return img, mask


def test_editor_keeps_shape_and_outside_pixels_without_gradients(editor):
    img, mask = _image_and_mask()
    kw = dict(source_prompt="a horse on the grass", target_prompt="a violet horse on the grass",
              object_words=["violet", "horse"], c=2.0, steps=2, guidance=2.0)
    out = editor.edit(img, mask, **kw)
    assert out.shape == img.shape and out.dtype == np.uint8
    assert np.array_equal(out[~mask], img[~mask])
    again = editor.edit(img, mask, **kw)
    assert np.array_equal(out, again)  # deterministic
    stronger = editor.edit(img, mask, **{**kw, "c": 3.0})
    assert not np.array_equal(stronger, out)  # c reaches the output
    # the UNet processors are restored and no gradient was tracked at inference
    assert not any(isinstance(p, MaskGuidedAttnProcessor) for p in editor.unet.attn_processors.values())
    assert all(not p.requires_grad for p in editor.unet.parameters())


def test_processor_sees_no_grad_during_edit(editor):
    img, mask = _image_and_mask()
    seen = []
    original = MaskGuidedAttnProcessor.__call__

    def spy(self, attn, hidden_states, *a, **k):
        seen.append(torch.is_grad_enabled())
        return original(self, attn, hidden_states, *a, **k)

    MaskGuidedAttnProcessor.__call__ = spy
    try:
        editor.edit(img, mask, "a photo of a horse", "a pencil sketch of a horse", ["horse"], c=1.0, steps=2,
                    guidance=1.0, local=False)
    finally:
        MaskGuidedAttnProcessor.__call__ = original
    assert seen and not any(seen)


def test_install_only_on_decoder(editor):
    unet = editor.unet
    guide = MaskGuidance(mask=torch.ones(4, 4, dtype=torch.bool), token_indices=[], c=1.0, latent_hw=(4, 4))
    before = dict(unet.attn_processors)
    changed = install_mask_guided_attention(unet, guide)
    try:
        procs = unet.attn_processors
        assert changed and all(n.startswith("up_blocks") for n in changed)
        assert all(not isinstance(p, MaskGuidedAttnProcessor) for n, p in procs.items() if not n.startswith("up_blocks"))
    finally:
        unet.set_attn_processor(before)


def test_editor_with_segmentation_controlnet():
    ed = tiny_editor(controlnet=True)
    img, mask = _image_and_mask()
    out = ed.edit(img, mask, "a horse", "a wooden horse", ["wooden", "horse"], c=2.0, steps=2, guidance=1.5)
    assert out.shape == img.shape and np.array_equal(out[~mask], img[~mask])


def test_diffusion_shift_with_a_given_editor(monkeypatch, editor):
    import shiftbench as sb
    from shiftbench.sample import Sample

    img, mask = _image_and_mask()
    monkeypatch.setattr(AttributeEditor, "from_pretrained", classmethod(lambda cls, *a, **k: editor))
    shift = sb.create_shift("attribute_color", color="violet", backend="diffusion", model="tiny", steps=2)
    s = Sample(image=img, mask=mask, caption="a horse on the grass", class_name="horse", id="h")
    out, params = shift(s, severity=5, seed=0, return_params=True)
    assert params["c"] == 3.0 and out.caption == "a violet horse on the grass"
    assert np.array_equal(out.image[~mask], img[~mask])
    assert np.array_equal(shift.replay(s, params).image, out.image)


def test_from_pretrained_loads_a_local_folder_and_refuses_a_missing_one(tmp_path, editor):
    from shiftbench.errors import ShiftbenchError

    for part in ("unet", "vae", "text_encoder", "tokenizer", "scheduler"):
        obj = getattr(editor, part)
        (obj.save_pretrained if hasattr(obj, "save_pretrained") else obj.save_config)(tmp_path / "sd" / part)
    loaded = AttributeEditor.from_pretrained(str(tmp_path / "sd"), resolution=16)
    img, mask = _image_and_mask()
    kw = dict(source_prompt="a horse", target_prompt="a violet horse", object_words=["violet", "horse"], steps=2)
    assert np.array_equal(loaded.edit(img, mask, **kw), editor.edit(img, mask, **kw))
    with pytest.raises(ShiftbenchError, match="cannot load diffusion model"):
        AttributeEditor.from_pretrained(str(tmp_path / "missing"))
