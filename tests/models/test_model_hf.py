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

import tiny_hub
from shiftbench.models.hf import HFCaptioner, HFDetector, HFSegmenter, HFZeroShotClassifier

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")
tokenizers = pytest.importorskip("tokenizers")

CLASSES = ["cat", "dog", "car"]
TEMPLATES = ["a photo of a {}.", "a bad photo of the {}."]


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("hf")
    return {"clip": tiny_hub.save_tiny_clip(root / "clip"), "siglip": tiny_hub.save_tiny_siglip(root / "siglip"),
            "detr": tiny_hub.save_tiny_detr(root / "detr", CLASSES),
            "segformer": tiny_hub.save_tiny_segformer(root / "segformer", num_labels=4),
            "blip2": tiny_hub.save_tiny_blip2(root / "blip2")}


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
    assert p.size == (32, 32) and p.scale_size == 40 and p.interpolation == "bicubic"
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
