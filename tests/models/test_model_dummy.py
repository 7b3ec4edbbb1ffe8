"""Dummy models: deterministic, shaped like the protocols say, sensitive to the pixels."""

from __future__ import annotations

import numpy as np
import pytest

import shiftbench as sb
from shiftbench.errors import ShiftbenchError
from shiftbench.models import Detections, check_outputs
from shiftbench.tasks import predict_batch


def _images():
    rng = np.random.default_rng(0)
    plain = np.full((40, 60, 3), 30, np.uint8)
    plain[10:30, 20:45] = (220, 40, 40)  # a red object on a dark background
    return [plain, rng.integers(0, 256, (33, 21, 3), dtype=np.uint8)]


def test_dummy_classifier_deterministic_and_batch_equals_items():
    images = _images()
    m = sb.create_model("dummy_classifier", label_space=7, seed=3)
    logits = m.predict_logits(images)
    assert logits.shape == (2, 7) and logits.dtype == np.float32
    assert np.array_equal(logits, sb.create_model("dummy_classifier", label_space=7, seed=3).predict_logits(images))
    assert np.array_equal(logits[1:], m.predict_logits(images[1:]))
    assert not np.array_equal(logits, sb.create_model("dummy_classifier", label_space=7, seed=4).predict_logits(images))
    assert m.task == "classification" and m.label_space.num_classes == 7
    assert sb.create_model("dummy_classifier").label_space.name == "imagenet1k"


def test_dummy_segmenter_detector_captioner():
    images = _images()
    seg = sb.create_model("dummy_segmenter")
    prob = seg.predict(images[:1])[0]
    assert prob.shape == (40, 60) and seg.class_agnostic
    mask = seg.predict_masks(images[:1])[0]
    assert mask[10:30, 20:45].all() and mask.sum() == 20 * 25
    semantic = sb.create_model("dummy_segmenter", num_classes=4).predict(images)
    assert [s.shape for s in semantic] == [(4, 40, 60), (4, 33, 21)]
    det = sb.create_model("dummy_detector").predict(images[:1])[0]
    assert isinstance(det, Detections) and np.allclose(det.boxes, [[20, 10, 45, 30]]) and det.masks.shape == (1, 40, 60)
    check_outputs([det], "dummy_detector", batch_size=1)
    captions = sb.create_model("dummy_captioner").predict(images)
    assert captions[0] == "a photo of a black dark scene"  # mostly dark background
    red = np.zeros((8, 8, 3), np.uint8)
    red[..., 0] = 200
    red[..., 1:] = 40
    assert sb.create_model("dummy_captioner").predict([red]) == ["a photo of a red dim scene"]
    assert captions == sb.create_model("dummy_captioner").predict(images)


def test_predict_batch_gives_each_task_what_its_metrics_take():
    images = _images()
    assert predict_batch(sb.create_model("dummy_classifier", label_space=4), images).shape == (2, 4)
    probs = predict_batch(sb.create_model("dummy_segmenter"), images)
    assert probs[0].dtype == np.float32 and probs[0].shape == (40, 60)
    labels = predict_batch(sb.create_model("dummy_segmenter", num_classes=3), images)
    assert labels[0].dtype == np.int64 and labels[0].max() < 3
    assert isinstance(predict_batch(sb.create_model("dummy_detector"), images)[0], Detections)
    assert all(isinstance(c, str) for c in predict_batch(sb.create_model("dummy_captioner"), images))

    class Broken:
        name, task = "broken", "classification"
        label_space = None

        def predict_logits(self, images):
            return np.full((len(images), 3), np.nan, np.float32)

    with pytest.raises(ShiftbenchError, match="NaN"):
        predict_batch(Broken(), images)
