"""transformers adapters on tiny random models built from config and saved to a folder (no downloads).

Each test loads through ``sb.create_model("hf:" + folder)`` and compares with the same model driven
directly through transformers: shapes, label spaces, batching, preprocessing, post-processing.
"""

from __future__ import annotations

import numpy as np
import pytest

import shiftbench as sb
from shiftbench.errors import ShiftbenchError
from shiftbench.models import Detections

from conftest import save_tiny_blip2
from shiftbench.models.hf import HFCaptioner, HFDetector, HFSegmenter, HFZeroShotClassifier

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")
tokenizers = pytest.importorskip("tokenizers")

WORDS = "a photo of the cat dog car red blue small large bad many sculpture itap origami".split()
CLASSES = ["cat", "dog", "car"]
TEMPLATES = ["a photo of a {}.", "a bad photo of the {}."]


def _tokenizer(with_eos: bool = True, extra: tuple[str, ...] = ()):
    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    vocab = {"[PAD]": 0, "[UNK]": 1, "[BOS]": 2, "[EOS]": 3}
    for w in WORDS + [".", ","]:
        vocab.setdefault(w, len(vocab))
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    single = "[BOS] $A [EOS]" if with_eos else "[BOS] $A"
    tok.post_processor = processors.TemplateProcessing(single=single, special_tokens=[("[BOS]", 2), ("[EOS]", 3)])
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="[PAD]", unk_token="[UNK]",
                                                bos_token="[BOS]", eos_token="[EOS]", model_max_length=16)
    if extra:
        fast.add_special_tokens({"additional_special_tokens": list(extra)})
    return fast


TEXT = dict(vocab_size=32, hidden_size=32, intermediate_size=37, num_hidden_layers=2, num_attention_heads=4,
            max_position_embeddings=16, bos_token_id=2, eos_token_id=3, pad_token_id=0)
VISION = dict(image_size=32, patch_size=8, hidden_size=32, intermediate_size=37, num_hidden_layers=2, num_attention_heads=4)


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    torch.manual_seed(0)
    root = tmp_path_factory.mktemp("hf")
    out = {}
    # CLIP: shortest edge 40, centre crop 32
    out["clip"] = root / "clip"
    transformers.CLIPModel(transformers.CLIPConfig(text_config=TEXT, vision_config=VISION, projection_dim=16)).save_pretrained(out["clip"])
    transformers.CLIPImageProcessor(size={"shortest_edge": 40}, crop_size={"height": 32, "width": 32}).save_pretrained(out["clip"])
    _tokenizer().save_pretrained(out["clip"])
    # SigLIP: squash to 32x32, mean/std 0.5
    out["siglip"] = root / "siglip"
    model = transformers.SiglipModel(transformers.SiglipConfig(text_config=TEXT, vision_config=VISION))
    with torch.no_grad():
        model.logit_bias.fill_(-2.5)
    model.save_pretrained(out["siglip"])
    transformers.SiglipImageProcessor(size={"height": 32, "width": 32}).save_pretrained(out["siglip"])
    _tokenizer().save_pretrained(out["siglip"])
    # DETR with a transformers ResNet backbone (no timm)
    out["detr"] = root / "detr"
    backbone = transformers.ResNetConfig(embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], out_features=["stage1", "stage2"])
    cfg = transformers.DetrConfig(
        use_timm_backbone=False, backbone_config=backbone, use_pretrained_backbone=False, d_model=16,
        encoder_layers=1, decoder_layers=1, encoder_attention_heads=2, decoder_attention_heads=2,
        encoder_ffn_dim=16, decoder_ffn_dim=16, num_queries=6, num_labels=3,
        id2label=dict(enumerate(CLASSES)), label2id={c: i for i, c in enumerate(CLASSES)})
    transformers.DetrForObjectDetection(cfg).save_pretrained(out["detr"])
    transformers.DetrImageProcessor(size={"shortest_edge": 32, "longest_edge": 64}).save_pretrained(out["detr"])
    # SegFormer semantic segmenter, 4 classes
    out["segformer"] = root / "segformer"
    cfg = transformers.SegformerConfig(num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1], hidden_sizes=[8, 16],
                                       patch_sizes=[7, 3], strides=[4, 2], num_attention_heads=[1, 2], mlp_ratios=[2, 2],
                                       decoder_hidden_size=16, num_labels=4)
    transformers.SegformerForSemanticSegmentation(cfg).save_pretrained(out["segformer"])
    transformers.SegformerImageProcessor(size={"height": 32, "width": 32}).save_pretrained(out["segformer"])
    # BLIP-2 with a tiny OPT decoder
    out["blip2"] = root / "blip2"
    tok = _tokenizer(with_eos=False, extra=("<image>",))
    save_tiny_blip2(out["blip2"], tok)
    return out


@pytest.fixture(scope="module")
def images():
    rng = np.random.default_rng(0)
    return [rng.integers(0, 256, (48, 64, 3), dtype=np.uint8), rng.integers(0, 256, (70, 40, 3), dtype=np.uint8)]


def _embedding(out):
    return out.pooler_output if hasattr(out, "pooler_output") else out


def test_clip_zero_shot_matches_transformers(folders, images):
    model = sb.create_model(f"hf:{folders['clip']}", classes=CLASSES, templates=TEMPLATES)
    assert isinstance(model, HFZeroShotClassifier) and model.task == "classification" and model.kind == "zero_shot_classifier"
    assert model.label_space.class_names == tuple(CLASSES)
    p = model.preprocess
    assert p.size == (32, 32) and p.crop_fraction == pytest.approx(32 / 40) and p.interpolation == "bicubic"
    assert p.mean == pytest.approx((0.48145466, 0.4578275, 0.40821073))
    logits = model.predict_logits(images)
    assert logits.shape == (2, 3) and logits.dtype == np.float32
    # reference: the same folder driven directly through transformers
    ref = transformers.CLIPModel.from_pretrained(folders["clip"]).eval()
    proc = transformers.AutoImageProcessor.from_pretrained(folders["clip"])
    tok = transformers.AutoTokenizer.from_pretrained(folders["clip"])
    with torch.no_grad():
        img = _embedding(ref.get_image_features(**proc(images=images, return_tensors="pt")))
        img = torch.nn.functional.normalize(img, dim=-1)
        classes = []
        for c in CLASSES:
            t = _embedding(ref.get_text_features(**tok([x.format(c) for x in TEMPLATES], padding=True, return_tensors="pt")))
            t = torch.nn.functional.normalize(t, dim=-1).mean(0)
            classes.append(t / t.norm())
        expected = ref.logit_scale.exp() * img @ torch.stack(classes).T
    assert np.allclose(logits, expected.numpy(), atol=1e-4)
    assert np.allclose(model.predict_logits(images[1:]), logits[1:], atol=1e-5)  # batch == items


def test_clip_defaults_to_imagenet_with_80_templates_lazily(folders):
    model = sb.create_model(f"hf:{folders['clip']}")
    assert model.label_space.name == "imagenet1k" and model.label_space.num_classes == 1000
    assert len(model.templates) == 80 and model._class_features is None  # text features built on first use
    model.set_classes(["cat", "dog"], ["itap of a {}."])
    assert model.class_features().shape == (2, 16)
    with pytest.raises(ShiftbenchError, match="placeholder"):
        model.set_classes(["cat"], ["no placeholder"])


def test_siglip_uses_bias_and_max_length_padding(folders, images):
    model = sb.create_model(f"hf:{folders['siglip']}", classes=CLASSES, templates=TEMPLATES)
    assert model.logit_bias == pytest.approx(-2.5) and model.preprocess.resize == "exact"
    logits = model.predict_logits(images)
    feats = model.encode_images(images)
    expected = model.logit_scale * feats @ model.class_features().T - 2.5
    assert np.allclose(logits, expected, atol=1e-5)
    ref = transformers.SiglipModel.from_pretrained(folders["siglip"]).eval()
    tok = transformers.AutoTokenizer.from_pretrained(folders["siglip"])
    with torch.no_grad():
        t = _embedding(ref.get_text_features(input_ids=tok(["a photo of a cat."], padding="max_length", max_length=16,
                                                          return_tensors="pt")["input_ids"]))
    assert np.allclose(model.encode_texts(["a photo of a cat."]), torch.nn.functional.normalize(t, dim=-1).numpy(), atol=1e-5)


def test_detr_detector_boxes_in_input_pixels(folders, images):
    model = sb.create_model(f"hf:{folders['detr']}", score_threshold=0.0)
    assert isinstance(model, HFDetector) and model.task == "detection"
    assert model.label_space.class_names == tuple(CLASSES)
    dets = model.predict(images)
    assert len(dets) == 2 and all(isinstance(d, Detections) for d in dets)
    for det, image in zip(dets, images):
        h, w = image.shape[:2]
        assert len(det) > 0 and det.labels.max() < 3
        assert (det.boxes[:, [0, 2]] <= w).all() and (det.boxes[:, [1, 3]] <= h).all() and (det.boxes >= 0).all()
    ref = transformers.DetrForObjectDetection.from_pretrained(folders["detr"]).eval()
    proc = transformers.AutoImageProcessor.from_pretrained(folders["detr"])
    with torch.no_grad():  # the same batch: DETR pads a batch to its largest image, so items differ slightly
        out = ref(**proc(images=images, return_tensors="pt"))
    expected = proc.post_process_object_detection(out, threshold=0.0, target_sizes=[im.shape[:2] for im in images])
    for det, exp in zip(dets, expected):
        assert np.allclose(det.scores, exp["scores"].numpy(), atol=1e-6)
        assert np.allclose(det.boxes, exp["boxes"].numpy(), atol=1e-4)
        assert np.array_equal(det.labels, exp["labels"].numpy())


def test_segformer_scores_at_input_size(folders, images):
    model = sb.create_model(f"hf:{folders['segformer']}")
    assert isinstance(model, HFSegmenter) and not model.class_agnostic and model.label_space.num_classes == 4
    scores = model.predict(images)
    assert [s.shape for s in scores] == [(4, 48, 64), (4, 70, 40)]
    masks = model.predict_masks(images)
    assert np.array_equal(masks[0], scores[0].argmax(0)) and masks[0].dtype == np.int64
    assert np.allclose(model.predict(images[1:])[0], scores[1], atol=1e-5)


def test_blip2_captioner_matches_generate(folders, images):
    model = sb.create_model(f"hf:{folders['blip2']}", max_new_tokens=5)
    assert isinstance(model, HFCaptioner) and model.task == "captioning" and model.label_space is None
    captions = model.predict(images)
    assert len(captions) == 2 and all(isinstance(c, str) for c in captions)
    ref = transformers.Blip2ForConditionalGeneration.from_pretrained(folders["blip2"]).eval()
    proc = transformers.AutoProcessor.from_pretrained(folders["blip2"])
    with torch.no_grad():
        tokens = ref.generate(**proc(images=images, return_tensors="pt"), max_new_tokens=5, do_sample=False)
    assert captions == [t.strip() for t in proc.batch_decode(tokens, skip_special_tokens=True)]
    assert model.predict(images) == captions


def test_task_override_and_errors(folders, tmp_path):
    with pytest.raises(ShiftbenchError, match="unknown task"):
        sb.create_model(f"hf:{folders['clip']}", task="retrieval")
    with pytest.raises(ShiftbenchError, match="cannot load"):
        sb.create_model(f"hf:{tmp_path / 'missing'}")
    assert sb.create_model(f"hf:{folders['clip']}", task="zero_shot", classes=["cat"]).label_space.num_classes == 1


def test_clip_text_tower_as_caption_similarity_encoder(folders):
    model = sb.create_model(f"hf:{folders['clip']}", classes=CLASSES, templates=TEMPLATES)
    metric = sb.create_metric("text_similarity", encoder=model)
    metric.update(["a photo of a cat.", "a red car"], ["a photo of a dog.", "a red car"])
    a = model.encode_texts(["a photo of a cat.", "a red car"])
    b = model.encode_texts(["a photo of a dog.", "a red car"])
    assert metric.compute()["text_similarity"] == pytest.approx(float((a * b).sum(1).mean()), abs=1e-6)
