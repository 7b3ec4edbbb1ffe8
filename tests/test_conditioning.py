"""Conditioning: mask post-processing, providers (exact, U2-Net-p, GrabCut, tiny random SAM + OWL-ViT),
prompt sets (exact paper strings) and captioners (never a placeholder)."""

from __future__ import annotations

import types

import numpy as np
import pytest

from shiftbench.conditioning import masks as M
from shiftbench.conditioning.captions import Blip2Captioner, TemplateCaptioner, create_captioner
from shiftbench.conditioning.prompts import prompt, prompt_names, prompt_sets, resolve_prompt
from shiftbench.errors import ShiftbenchError
from shiftbench.sample import Sample

import tiny_hub
from conftest import make_sample


# -- post-processing --------------------------------------------------------------------------------
def test_largest_component_and_holes():
    m = np.zeros((20, 20), bool)
    m[2:12, 2:12] = True
    m[5:8, 5:8] = False  # a hole
    m[15:18, 15:18] = True  # a stray blob
    out = M.postprocess(m)
    assert out[6, 6] and not out[16, 16]
    assert out.sum() == 100
    # a hole that opens onto the image border is not a hole
    edge = np.ones((10, 10), bool)
    edge[0:4, 4:6] = False
    assert np.array_equal(M.fill_holes(edge), edge)
    # instance maps count every instance as object
    inst = np.zeros((10, 10), np.int32)
    inst[1:4, 1:4] = 1
    inst[6:9, 6:9] = 2
    assert M.postprocess(inst, largest=False).sum() == 18


def test_dilation_is_elliptical_with_the_requested_radius():
    m = np.zeros((41, 41), bool)
    m[20, 20] = True
    d = M.dilate(m, 6)
    ys, xs = np.nonzero(d)
    assert ys.min() == 14 and ys.max() == 26 and xs.min() == 14 and xs.max() == 26  # 6 px each way
    assert not d[14, 14]  # the corner of the 13x13 square is outside the ellipse
    dist = np.hypot(ys - 20, xs - 20)
    assert dist.max() <= 6.5
    assert M.DEFAULT_DILATION == 6
    assert np.array_equal(M.dilate(m, 0), m)
    with pytest.raises(ShiftbenchError, match="dilation"):
        M.dilate(m, -1)


def test_quality_and_iou():
    m = np.zeros((10, 10), bool)
    m[2:6, 2:6] = True
    assert M.mask_quality(m) == 1.0
    assert M.mask_quality(np.zeros_like(m)) == 0.0 and M.mask_quality(np.ones_like(m)) == 0.0
    raw = m.copy()
    raw[8, 8] = True  # a stray pixel lowers the share kept
    assert M.mask_quality(M.postprocess(raw), raw) == pytest.approx(16 / 17)
    prob = np.where(m, 0.95, 0.05).astype(np.float32)
    assert M.stability_score(prob) == 1.0
    prob[2:4, 2:6] = 0.55  # half the object is uncertain
    assert M.stability_score(prob) == pytest.approx(0.5)
    assert M.mask_iou(m, m) == 1.0 and M.mask_iou(m, ~m) == 0.0
    with pytest.raises(ShiftbenchError, match="shapes differ"):
        M.mask_iou(m, m[:5])


def test_check_object_mask_refuses_unusable_masks():
    where = "test"
    with pytest.raises(ShiftbenchError, match="empty"):
        M.check_object_mask(np.zeros((4, 4), bool), (4, 4), where)
    with pytest.raises(ShiftbenchError, match="whole image"):
        M.check_object_mask(np.ones((4, 4), bool), (4, 4), where)
    with pytest.raises(ShiftbenchError, match="does not match"):
        M.check_object_mask(np.ones((4, 5), bool), (4, 4), where)


# -- providers --------------------------------------------------------------------------------------
def test_ground_truth_provider_and_unknown_names():
    s = make_sample()
    r = M.create_mask_provider("ground_truth")(s)
    assert np.array_equal(r.mask, s.mask) and r.quality == 1.0
    with pytest.raises(ShiftbenchError, match="no mask"):
        M.create_mask_provider("ground_truth")(s.replace(mask=None))
    with pytest.raises(ShiftbenchError, match="did you mean 'grabcut'"):
        M.create_mask_provider("grabcat")


@pytest.fixture(scope="module")
def objects_samples():
    import shiftbench as sb

    ds = sb.load_dataset("objects")
    return [ds.load(i) for i in (0, 150, 300)]  # 3 objects on 3 scenes


def test_u2netp_and_grabcut_find_the_object(objects_samples):
    u2 = M.create_mask_provider("u2netp", threads=1)
    gc = M.create_mask_provider("grabcut")
    ious = {"u2netp": [], "grabcut": []}
    for s in objects_samples:
        for key, prov in (("u2netp", u2), ("grabcut", gc)):
            r = prov(s)
            assert r.mask.shape == s.size and r.mask.dtype == bool and 0 <= r.quality <= 1
            ious[key].append(M.mask_iou(r.mask, s.mask))
    # (benchmarks/mask_iou.py measures all 94 objects; these are three of them)
    assert np.mean(ious["u2netp"]) >= 0.75
    assert np.mean(ious["grabcut"]) >= 0.5
    s = objects_samples[0]
    boxed = M.create_mask_provider("u2netp", box=True, threads=1)(s)
    assert M.mask_iou(boxed.mask, s.mask) >= 0.6
    x0, y0, x1, y1 = M.sample_box(s)
    outside = np.ones(s.size, bool)
    outside[y0:y1, x0:x1] = False
    assert not boxed.mask[outside].any() and not boxed.probability[outside].any()
    # GrabCut is seeded: the same image gives the same mask; the cache hands back the same result
    again = M.create_mask_provider("grabcut")(s)
    assert np.array_equal(again.mask, gc(s).mask)
    assert gc(s) is gc(s)
    with pytest.raises(ShiftbenchError, match="needs a box"):
        gc(s.replace(boxes=None))


def _word_tokenizer(transformers):
    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    vocab = {"[PAD]": 0, "[UNK]": 1, "[BOS]": 2, "[EOS]": 3}
    for w in "a photo of tabby cat red disc".split():
        vocab.setdefault(w, len(vocab))
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(single="[BOS] $A [EOS]", special_tokens=[("[BOS]", 2), ("[EOS]", 3)])
    return transformers.PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="[PAD]", unk_token="[UNK]",
                                                bos_token="[BOS]", eos_token="[EOS]", model_max_length=16)


@pytest.fixture(scope="module")
def tiny_sam():
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    cfg = transformers.SamConfig(
        vision_config=dict(hidden_size=32, output_channels=16, num_hidden_layers=2, num_attention_heads=2, image_size=64,
                           patch_size=8, mlp_dim=32, window_size=4, global_attn_indexes=[1], num_pos_feats=8),
        prompt_encoder_config=dict(hidden_size=16, image_size=64, patch_size=8, mask_input_channels=4),
        mask_decoder_config=dict(hidden_size=16, mlp_dim=32, num_hidden_layers=2, num_attention_heads=2,
                                 iou_head_hidden_dim=16))
    image_proc_cls = getattr(transformers, "SamImageProcessorPil", transformers.SamImageProcessor)
    proc = transformers.SamProcessor(image_proc_cls(size={"longest_edge": 64}, pad_size={"height": 64, "width": 64},
                                                    mask_size={"longest_edge": 16},
                                                    mask_pad_size={"height": 16, "width": 16}))
    return transformers.SamModel(cfg).eval(), proc


@pytest.fixture(scope="module")
def tiny_owlvit():
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    torch.manual_seed(1)
    cfg = transformers.OwlViTConfig(
        text_config=dict(vocab_size=16, hidden_size=32, intermediate_size=37, num_hidden_layers=1, num_attention_heads=4,
                         max_position_embeddings=16, bos_token_id=2, eos_token_id=3, pad_token_id=0),
        vision_config=dict(image_size=32, patch_size=8, hidden_size=32, intermediate_size=37, num_hidden_layers=1,
                           num_attention_heads=4), projection_dim=32)
    image_proc_cls = getattr(transformers, "OwlViTImageProcessorPil", transformers.OwlViTImageProcessor)
    proc = transformers.OwlViTProcessor(image_processor=image_proc_cls(size={"height": 32, "width": 32},
                                                                       crop_size={"height": 32, "width": 32}),
                                        tokenizer=_word_tokenizer(transformers))
    return transformers.OwlViTForObjectDetection(cfg).eval(), proc


def test_sam_box_prompt_follows_transformers(tiny_sam):
    import torch

    model, proc = tiny_sam
    s = make_sample()
    r = M.SamMasks(model=tiny_sam)(s)
    assert r.mask.shape == s.size and r.mask.dtype == bool and r.probability.shape == s.size
    # the same prediction driven directly through transformers: the best-IoU mask of the box prompt
    box = [float(v) for v in s.boxes[0]]
    inputs = proc(images=[s.image], input_boxes=[[box]], return_tensors="pt")
    with torch.no_grad():
        out = model(pixel_values=inputs["pixel_values"], input_boxes=inputs["input_boxes"], multimask_output=True)
    logits = proc.image_processor.post_process_masks(out.pred_masks, inputs["original_sizes"],
                                                     inputs["reshaped_input_sizes"], binarize=False)[0][0]
    best = int(out.iou_scores[0, 0].argmax())
    expected = M.postprocess(torch.sigmoid(logits[best]).numpy() > 0.5)
    assert np.array_equal(r.mask, expected)
    points = M.SamMasks(model=tiny_sam, prompt="points", points=[[30, 24]])(s)
    assert points.mask.shape == s.size
    with pytest.raises(ShiftbenchError, match="needs detector"):
        M.SamMasks(model=tiny_sam, prompt="text")


def test_sam_text_prompt_takes_the_detectors_best_box(tiny_sam, tiny_owlvit, monkeypatch):
    s = make_sample()
    provider = M.SamMasks(model=tiny_sam, prompt="text", detector=tiny_owlvit)
    box = provider.detect_box(s)
    assert len(box) == 4 and 0 <= box[0] <= box[2] <= s.size[1] and 0 <= box[1] <= box[3] <= s.size[0]
    seen = []
    real = provider.detect_box
    monkeypatch.setattr(provider, "detect_box", lambda sample: seen.append(sample.class_name) or real(sample))
    r = provider(s)
    assert seen == ["tabby cat"] and r.mask.shape == s.size


def test_detector_boxes_are_converted_from_normalised_centres():
    import torch

    out = types.SimpleNamespace(logits=torch.tensor([[[-5.0], [3.0]]]),
                                pred_boxes=torch.tensor([[[0.5, 0.5, 0.2, 0.2], [0.25, 0.25, 0.5, 0.25]]]))
    boxes, scores = M._detector_boxes(out, (50, 100))  # padded to a 100 x 100 square
    assert np.allclose(boxes[1], [0, 12.5, 50, 37.5]) and scores.argmax() == 1


# -- prompts and captions -----------------------------------------------------------------------------
def test_prompt_sets_are_the_papers_exact_strings():
    sets = prompt_sets()
    assert sets["class_label"] == ["This is a picture of a {class_name}"]
    assert [prompt("color", i) for i in range(1, 5)] == [
        f"This is a picture of a vivid {c} background" for c in ("red", "green", "blue", "colorful")]
    assert [prompt("texture", i) for i in range(1, 5)] == [
        "This is a picture of textures in the background",
        "This is a picture of intricately textured background",
        "This is a picture of colorful textured background",
        "This is a photo of distorted textures in the background",
    ]
    assert prompt_names() == ["class_label", "caption"] + [f"color{i}" for i in range(1, 5)] + \
        [f"texture{i}" for i in range(1, 5)]
    assert resolve_prompt("class_label", class_name="goldfish") == "This is a picture of a goldfish"
    assert resolve_prompt("caption", caption="a dog on grass") == "a dog on grass"
    assert resolve_prompt("a {class_name} in snow", class_name="fox") == "a fox in snow"


def test_prompts_refuse_what_they_cannot_use():
    with pytest.raises(ShiftbenchError, match="needs a caption"):
        resolve_prompt("caption", caption=None)  # never a placeholder prompt
    with pytest.raises(ShiftbenchError, match="class name"):
        resolve_prompt("class_label", class_name="")
    with pytest.raises(ShiftbenchError, match="cannot go into a prompt"):
        resolve_prompt("class_label", class_name="bad {name}")
    with pytest.raises(ShiftbenchError, match="1..4"):
        prompt("color", 5)
    with pytest.raises(ShiftbenchError, match="unknown prompt"):
        resolve_prompt("colour9")


def test_template_captioner_and_empty_blip2_captions_are_errors():
    s = make_sample().replace(meta={"scene_id": "pebble_beach"})
    assert TemplateCaptioner()([s]) == ["a photo of a tabby cat on a pebble beach"]
    assert create_captioner("template")([s.replace(meta={}, class_name="orange")]) == ["a photo of an orange"]
    with pytest.raises(ShiftbenchError, match="class name"):
        TemplateCaptioner()([Sample(image=s.image)])

    class Fixed:
        def __init__(self, texts):
            self.texts = texts

        def predict(self, images):
            return self.texts[: len(images)]

    assert Blip2Captioner(model=Fixed([" a cat "]))([s]) == ["a cat"]
    with pytest.raises(ShiftbenchError, match="empty caption"):
        Blip2Captioner(model=Fixed([""]))([s])
    with pytest.raises(ShiftbenchError, match="unknown captioner"):
        create_captioner("blip3")


def test_blip2_captioner_on_a_tiny_random_model(tmp_path):
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"[PAD]": 0, "[UNK]": 1, "[BOS]": 2, "[EOS]": 3}
    for w in "a photo of tabby cat red disc on grass".split():
        vocab.setdefault(w, len(vocab))
    tk = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tk.pre_tokenizer = pre_tokenizers.Whitespace()
    tok = transformers.PreTrainedTokenizerFast(tokenizer_object=tk, pad_token="[PAD]", unk_token="[UNK]",
                                               bos_token="[BOS]", eos_token="[EOS]", model_max_length=16)
    tok.add_special_tokens({"additional_special_tokens": ["<image>"]})
    torch.manual_seed(0)
    folder = tmp_path / "blip2"
    tiny_hub.save_tiny_blip2(folder, tok)
    from shiftbench.models.hf import HFCaptioner

    samples = [make_sample(sid="b0"), make_sample(seed=1, sid="b1")]
    direct = [t.strip() for t in HFCaptioner(str(folder), max_new_tokens=5).predict([s.image for s in samples])]
    captioner = create_captioner("blip2", model=str(folder), max_new_tokens=5)
    if all(direct):
        assert captioner(samples) == direct
    else:  # a random decoder may emit only special tokens: that must be an error, never a placeholder
        with pytest.raises(ShiftbenchError, match="empty caption"):
            captioner(samples)
    with pytest.raises(ShiftbenchError, match="cannot load captioner|cannot load"):
        create_captioner("blip2", model=str(tmp_path / "missing"))(samples)
